#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <utility>

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

namespace {
uint32_t generation_of(uint64_t state) { return uint32_t(state >> 32); }
int64_t next_of(uint64_t state) { return int64_t(state & 0xffffffffu); }
}  // namespace

void ThreadPool::take_chunks(uint32_t gen) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(s) != gen) return;  // another job has begun
    const int64_t c = next_of(s), chunks = job_chunks_.load(std::memory_order_relaxed);
    const Chunk* fn = job_.load(std::memory_order_relaxed);
    if (c >= chunks) return;
    // Claimed only while the generation holds: then the job is unfinished, and fn and chunks are its own.
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    try {
      (*fn)(c);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard<std::mutex> lk(mu_);  // the caller checks finished_ under mu_ before it sleeps
      cv_done_.notify_one();
    }
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_main(int index) {
  flush_denormals();  // core/float_mode.h
  if (!cpus_.empty()) pin_current_thread({cpus_[size_t(index) % cpus_.size()]});
  uint32_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_of(state_.load(std::memory_order_relaxed)) != seen; });
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_of(state_.load(std::memory_order_relaxed)) != seen; });
      if (stop_) return;
    }
    seen = generation_of(state_.load(std::memory_order_acquire));
    take_chunks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  const DenormalsFlushed flushed;  // as on the workers: a chunk's bits do not depend on its thread
  const int64_t chunks = std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  const Chunk chunk = [&](int64_t c) { fn(n * c / chunks, n * (c + 1) / chunks); };
  std::lock_guard<std::mutex> call(call_mu_);
  const uint32_t gen = ++generation_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = nullptr;
    job_.store(&chunk, std::memory_order_relaxed);
    job_chunks_.store(chunks, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    state_.store(uint64_t(gen) << 32, std::memory_order_release);
  }
  cv_start_.notify_all();
  take_chunks(gen);
  spin_until([&] { return finished_.load(std::memory_order_acquire) == chunks; });
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return finished_.load(std::memory_order_acquire) == chunks; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace ar
