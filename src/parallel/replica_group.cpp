#include "parallel/replica_group.h"

#include <cblas.h>

#include <exception>

#include "core/error.h"

namespace ar::parallel {

ReplicaGroup::ReplicaGroup(std::vector<DeviceSlot> slots) {
  errors_.resize(slots.size());
  job_rank_.assign(slots.size(), -1);
  kinds_.resize(slots.size(), ErrorKind::Internal);
  for (auto& s : slots) {
    auto w = std::make_unique<Worker>();
    w->slot = std::move(s);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) w->ctx = std::make_unique<Context>(w->slot.device, w->slot.cores);
  for (size_t r = 0; r < workers_.size(); ++r) workers_[r]->thread = std::thread([this, r] { main(int(r)); });
}

ReplicaGroup::~ReplicaGroup() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& w : workers_) w->thread.join();
}

void ReplicaGroup::main(int rank) {
  Worker& me = *workers_[size_t(rank)];
  pin_current_thread(me.slot.cores);
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_rank_[size_t(rank)] >= 0 ? job_ : nullptr;
    }
    std::string err;
    ErrorKind kind = ErrorKind::Internal;
    if (job) {
      try {
        (*job)(job_rank_[size_t(rank)]);
      } catch (const Error& e) {
        err = e.what();
        kind = e.kind();
      } catch (const std::exception& e) {
        err = e.what();
        if (err.empty()) err = "unknown error";
      } catch (...) {
        err = "unknown error";
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    errors_[size_t(rank)] = std::move(err);
    kinds_[size_t(rank)] = kind;
    if (--pending_ == 0) cv_done_.notify_one();
  }
}

void ReplicaGroup::run(int world, const std::function<void(int)>& fn) {
  if (world < 1 || world > size()) fail(ErrorKind::Internal, "ReplicaGroup::run: world out of range");
  std::vector<int> m(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) m[size_t(r)] = r;
  run_on(m, fn);
}

void ReplicaGroup::run_on(const std::vector<int>& members, const std::function<void(int)>& fn) {
  std::lock_guard<std::mutex> call(call_mu_);
  // Pool threads call BLAS concurrently: it must not use its own threads (set before any dispatch).
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  std::unique_lock<std::mutex> lk(mu_);
  job_rank_.assign(workers_.size(), -1);
  for (size_t r = 0; r < members.size(); ++r) {
    const int m = members[r];
    if (m < 0 || m >= size() || job_rank_[size_t(m)] >= 0) fail(ErrorKind::Internal, "ReplicaGroup: bad member list");
    job_rank_[size_t(m)] = int(r);
  }
  job_ = &fn;
  pending_ = size();
  ++generation_;
  cv_start_.notify_all();
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  for (size_t r = 0; r < members.size(); ++r) {
    const size_t m = size_t(members[r]);
    if (!errors_[m].empty())
      fail(kinds_[m], "replica " + std::to_string(r) + " on " + workers_[m]->slot.device.str() + " failed: " + errors_[m]);
  }
}

std::vector<double> shard_and_reduce(ReplicaGroup* group, int world, int64_t items, size_t width,
                                     const std::function<void(Context&, int64_t, double*)>& eval, Context& home) {
  std::vector<double> acc(width, 0.0);
  if (!group || world < 2 || items < 2) {
    for (int64_t i = 0; i < items; ++i) eval(home, i, acc.data());
    return acc;
  }
  world = int(std::min<int64_t>(world, items));
  std::vector<std::vector<double>> part(static_cast<size_t>(world));
  group->run(world, [&](int r) {
    part[size_t(r)].assign(width, 0.0);
    for (int64_t i = items * r / world; i < items * (r + 1) / world; ++i) eval(group->ctx(r), i, part[size_t(r)].data());
  });
  for (int r = 0; r < world; ++r)
    for (size_t k = 0; k < width; ++k) acc[k] += part[size_t(r)][k];
  return acc;
}

}  // namespace ar::parallel
