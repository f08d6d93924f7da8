// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into one
// contiguous chunk per thread (the caller runs chunk 0), so work is spread without a queue.
// Waits spin briefly before they block: a worker polls for the next job, and the caller for the
// workers' ends, for up to kSpin before sleeping on the condition variables. The tuning loop hands
// out hundreds of jobs per iteration a few microseconds apart; waking a sleeping thread costs tens of
// microseconds (more on a virtual machine, where an idle vCPU halts), and so did every job.
// BLAS is only ever called single-threaded, from inside chunks (core/context.h), so threads in flight
// never exceed the pool's size.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ar {

class ThreadPool {
 public:
  // With `cpus`, worker i is pinned to cpus[i % cpus.size()] (the calling thread is not touched:
  // whoever calls parallel_for runs chunk 0 where it already runs).
  // At most kMaxThreads threads (more is refused with InvalidInput: a bad count must not exhaust the
  // host's process table).
  static constexpr int kMaxThreads = 1024;
  // How long a wait polls before it sleeps (docs/benchmarks.md, "An AMD Zen 4": 100 and 1000 us measured alike).
  static constexpr std::chrono::microseconds kSpin{100};
  explicit ThreadPool(int n_threads, std::vector<int> cpus = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // The grain for items of `cost` element operations each: chunks of at least ~32K operations, so a
  // wake-up (a few microseconds) never costs more than the work it hands out.
  static int64_t grain(int64_t cost) { return std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, cost)); }
  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks smaller than `grain` are merged.
  // Rethrows the first exception thrown by any chunk after all chunks have finished.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_main(int index);

  std::vector<int> cpus_;

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  // Written under mu_; atomic so that the spinning phase may poll them without it.
  std::atomic<uint64_t> generation_ = 0;
  std::atomic<int> pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex call_mu_;  // serializes concurrent parallel_for calls on one pool
};

// Pins the calling thread to `cpus` (no-op when empty); returns false if the OS refused.
bool pin_current_thread(const std::vector<int>& cpus);

}  // namespace ar
