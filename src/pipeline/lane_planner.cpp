#include "pipeline/lane_planner.h"

#include "core/error.h"
#include "core/log.h"
#include "parallel/devices.h"

namespace ar {

LanePlanner::LanePlanner(const QuantizeOptions& opt, Device home, int64_t nsamples, std::vector<std::string>& notes)
    : opt_(opt), home_(home), nsamples_(nsamples), notes_(notes) {
  if (opt.parallel.mode == parallel::ParallelSetting::Off) return;
  auto slots = parallel::cpu_device_slots(parallel::CpuTopology::detect(), parallel::parse_device_list(opt.devices));
  for (const auto& sl : slots) {
    devices_.push_back({sl.device, sl.free_bytes});
    log_info("lane device " + sl.str() + ", " + std::to_string(sl.free_bytes >> 20) + " MiB free");
  }
  if (slots.size() >= 2) group_ = std::make_unique<parallel::ReplicaGroup>(slots);
  else if (opt.devices.empty() && opt.parallel.mode == parallel::ParallelSetting::Auto)
    log_info("parallel: one visible device (one CPU device per NUMA node); split the cores with --devices "
             "cpu:0,cpu:1 to run replicas side by side");
}

quant::TuneLane LanePlanner::lane(parallel::Phase phase, int64_t items, size_t mirror_bytes) {
  parallel::PlanInput in;
  in.setting = opt_.parallel;
  in.phase = phase;
  in.home = home_;
  in.devices = devices_;
  in.gradient_accumulate_steps = opt_.tune.gradient_accumulate_steps;
  in.deterministic = opt_.tune.deterministic;
  in.items = items;
  in.nsamples = nsamples_;
  in.mirror_bytes = mirror_bytes;
  const parallel::Plan plan = parallel::resolve_plan(in);
  if (plan.refused()) {
    std::string why;
    for (const auto& r : plan.refusals) why.append(why.empty() ? "" : "; ").append(r);
    if (opt_.devices.empty()) why += " (CPU devices: split the cores with --devices cpu:0,cpu:1,...)";
    fail(ErrorKind::InvalidInput, "--parallel_quantization " + opt_.parallel.str() + " cannot run: " + why);
  }
  for (const auto& note : plan.notes)
    if (logged_.insert(note).second) {
      log_info("parallel: " + note);
      notes_.push_back("parallel: " + note);
    }
  quant::TuneLane lane;
  if (plan.parallel() && group_) {
    lane.group = group_.get();
    lane.world = plan.world;
    for (const Device& d : plan.devices)
      for (int m = 0; m < group_->size(); ++m)
        if (group_->slot(m).device == d) lane.members.push_back(m);
  }
  return lane;
}

}  // namespace ar
