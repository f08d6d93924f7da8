// One persistent, pinned thread per device of the lane, each with its own Context (thread pool on the
// device's cores, allocator, single-threaded BLAS per pool thread). run() is fork-join: it hands fn to
// ranks [0, world), waits for all of them and only then reports failures, so a failing replica can
// neither deadlock the others nor leave a phase half done. The error names the replica and its device.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/devices.h"

namespace ar::parallel {

class ReplicaGroup {
 public:
  explicit ReplicaGroup(std::vector<DeviceSlot> slots);
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  int size() const { return int(workers_.size()); }
  Context& ctx(int rank) { return *workers_[size_t(rank)]->ctx; }
  const DeviceSlot& slot(int rank) const { return workers_[size_t(rank)]->slot; }
  // fn(rank) on ranks [0, world) in parallel; throws ar::Error naming the lowest failing rank.
  void run(int world, const std::function<void(int)>& fn);
  // The same on chosen members: rank r runs on members[r] (distinct, ascending not required).
  void run_on(const std::vector<int>& members, const std::function<void(int)>& fn);

 private:
  struct Worker {
    DeviceSlot slot;
    std::unique_ptr<Context> ctx;
    std::thread thread;
  };
  void main(int rank);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int)>* job_ = nullptr;
  std::vector<int> job_rank_;  // per member: its rank in the job, -1 = idle
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::string> errors_;  // per rank, empty = ok
  std::vector<ErrorKind> kinds_;
  std::mutex call_mu_;
};

// Generic shard-and-reduce for no-grad searches: item i adds its contribution into acc[0, width).
// Each replica sums its contiguous slice into a private accumulator on its own device; the partials
// are added on the home side in rank order. Fewer than two items, or no group, runs the serial loop.
std::vector<double> shard_and_reduce(ReplicaGroup* group, int world, int64_t items, size_t width,
                                     const std::function<void(Context&, int64_t, double*)>& eval, Context& home);

}  // namespace ar::parallel
