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

parallel::Plan LanePlanner::resolve(parallel::Phase phase, int64_t items, size_t mirror_bytes) {
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
  parallel::Plan plan = parallel::resolve_plan(in);
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
  return plan;
}

std::string LanePlanner::plan_line(parallel::Phase phase, int64_t items, size_t mirror_bytes) {
  const char* what = phase == parallel::Phase::Tune ? "tuning" : phase == parallel::Phase::Search ? "search" : "block passes";
  if (opt_.parallel.mode == parallel::ParallelSetting::Off)
    return std::string("lane: serial ") + what + " on every core (--parallel_quantization off)";
  const parallel::Plan plan = resolve(phase, items, mirror_bytes);
  if (!plan.parallel() || !group_) return std::string("lane: serial ") + what + " (see the parallel notes above)";
  std::string line = "lane: data-parallel " + std::string(what) + " on " + std::to_string(plan.world) + " replicas:";
  for (size_t r = 0; r < plan.devices.size(); ++r)
    line += (r ? ", " : " ") + plan.devices[r].str() + " [" + std::to_string(plan.ranges[r].first) + ", " +
            std::to_string(plan.ranges[r].second) + ")";
  return line + (opt_.tune.deterministic ? ", one gradient exchange per iteration (deterministic tree)"
                                         : ", one gradient exchange per iteration");
}

quant::TuneLane LanePlanner::lane(parallel::Phase phase, int64_t items, size_t mirror_bytes) {
  const parallel::Plan plan = resolve(phase, items, mirror_bytes);
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
