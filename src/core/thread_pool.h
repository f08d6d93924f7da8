// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into one
// contiguous chunk per thread, and every thread (the caller included) takes the next untaken chunk from
// a shared counter: chunks are fixed by n, the grain and the pool's size, never by who runs them.
// The caller waits for the chunks, not for the workers: a worker that has not woken up (a vCPU the
// host has not scheduled, a core shared with another process) by the time the caller is done with its
// own chunk finds its chunk taken, and the job does not wait for it (docs/benchmarks.md, "Chunks
// taken, not dealt").
// Waits spin briefly before they block: a worker polls for the next job, and the caller for the
// chunks' ends, for up to kSpin before sleeping on the condition variables. The tuning loop hands
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
  // Calls fn(begin, end) on disjoint chunks covering [0, n): one per thread, none smaller than `grain`
  // (except where n is). Rethrows the first exception thrown by any chunk after all chunks have finished.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  using Chunk = std::function<void(int64_t chunk)>;
  void worker_main(int index);
  // Runs untaken chunks of job `gen` on this thread until none is left or another job has begun.
  void take_chunks(uint32_t gen);

  std::vector<int> cpus_;

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  // The job: its generation in the high 32 bits of state_, the next chunk to take in the low 32. job_
  // and job_chunks_ are written before the generation is published and read after it is; a taker
  // claims a chunk with one compare-exchange that also checks the generation, so a late worker never
  // runs a finished job's function.
  std::atomic<uint64_t> state_ = 0;
  std::atomic<const Chunk*> job_ = nullptr;
  std::atomic<int64_t> job_chunks_ = 0;
  std::atomic<int64_t> finished_ = 0;  // chunks of the current job done
  uint32_t generation_ = 0;            // the caller's count of jobs (under call_mu_)
  bool stop_ = false;                  // under mu_
  std::exception_ptr error_;           // under mu_
  std::mutex call_mu_;  // serializes concurrent parallel_for calls on one pool
};

// Pins the calling thread to `cpus` (no-op when empty); returns false if the OS refused.
bool pin_current_thread(const std::vector<int>& cpus);

}  // namespace ar
