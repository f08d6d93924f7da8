#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/float_mode.h"

namespace ar {

bool pin_current_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

ThreadPool::ThreadPool(int n_threads, std::vector<int> cpus) : cpus_(std::move(cpus)) {
  if (n_threads > kMaxThreads)
    fail(ErrorKind::InvalidInput, "a pool of " + std::to_string(n_threads) + " threads exceeds the limit of " +
                                      std::to_string(kMaxThreads));
  for (int i = 1; i < std::max(1, n_threads); ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

// Polls `done` until it holds or kSpin has passed; true if it held (the caller then takes the lock, and
// its condition-variable wait returns at once).
template <class Done>
static bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

static void chunk_range(int64_t n, int chunks, int i, int64_t* b, int64_t* e) {
  *b = n * i / chunks;
  *e = n * (i + 1) / chunks;
}

void ThreadPool::worker_main(int index) {
  flush_denormals();  // core/float_mode.h
  if (!cpus_.empty()) pin_current_thread({cpus_[size_t(index) % cpus_.size()]});
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int chunks;
    spin_until([&] { return generation_.load(std::memory_order_relaxed) != seen; });
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (index < chunks) {
      int64_t b, e;
      chunk_range(n, chunks, index, &b, &e);
      try {
        if (b < e) (*job)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) cv_done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  const DenormalsFlushed flushed;  // as on the workers: a chunk's bits do not depend on its thread
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int chunks = int(std::min<int64_t>(size(), max_chunks));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = int(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  cv_start_.notify_all();
  std::exception_ptr mine;
  try {
    int64_t b, e;
    chunk_range(n, chunks, 0, &b, &e);
    fn(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  spin_until([&] { return pending_.load(std::memory_order_relaxed) == 0; });
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace ar
