#include "parallel/plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace ar::parallel {

ParallelSetting ParallelSetting::parse(const std::string& s) {
  ParallelSetting p;
  if (s.empty() || s == "off") return p;
  if (s == "auto") {
    p.mode = Auto;
    return p;
  }
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (*end || end == s.c_str() || errno == ERANGE || v < 1 || v > kMaxWorld)
    fail(ErrorKind::InvalidInput, "--parallel_quantization '" + s + "': expected off, auto or a world size from 1 to " +
                                      std::to_string(kMaxWorld));
  p.mode = v == 1 ? Off : Explicit;
  p.world = int(v);
  return p;
}

std::string ParallelSetting::str() const {
  return mode == Off ? "off" : mode == Auto ? "auto" : std::to_string(world);
}

MirrorPrice price_mirror(int64_t weight_elems, int64_t tuned_elems, int tree_levels, int64_t cache_elems_per_sample,
                         int64_t leaf_samples) {
  MirrorPrice p;
  p.weights = size_t(weight_elems) * 4;
  p.tuning = size_t(tuned_elems) * (4 * (4 + size_t(std::max(1, tree_levels))) + 1);
  p.activations = size_t(cache_elems_per_sample) * size_t(std::max<int64_t>(1, leaf_samples)) * 4;
  p.margin = (p.weights + p.tuning + p.activations) / 10 + (size_t(64) << 20);
  return p;
}

namespace {
std::string mib(size_t b) { return std::to_string((b + (size_t(1) << 19)) >> 20) + " MiB"; }

bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Largest usable world <= w for `items` (see the header).
int usable_world(int w, const PlanInput& in) {
  const int64_t items = std::max<int64_t>(in.items, 0);
  for (int k = int(std::min<int64_t>(w, items)); k >= 2; --k) {
    if (in.phase == Phase::Tune && in.deterministic && (!pow2(k) || items % k)) continue;
    return k;
  }
  return 1;
}
}  // namespace

Plan resolve_plan(const PlanInput& in) {
  Plan plan;
  auto serial = [&](Plan& p) {
    p.world = 1;
    p.devices = {in.home};
    p.ranges = {{0, in.phase == Phase::Tune ? in.nsamples : in.items}};
    return p;
  };
  if (in.setting.mode == ParallelSetting::Off) return serial(plan);
  const bool expl = in.setting.mode == ParallelSetting::Explicit;
  std::vector<std::string> hard;
  if (!in.home_supported) hard.push_back("home device " + in.home.str() + " has no backend in this binary");
  for (const auto& d : in.devices)
    if (d.device.kind != in.home.kind)
      hard.push_back("device " + d.device.str() + " is not of the home device's kind (" + in.home.str() + ")");
  if (in.multiprocess_active) hard.push_back("the multi-process lane is active (one lane per run)");
  if (!in.flat_pool) hard.push_back("the calibration pool is not a flat list of samples");
  if (!in.block_on_one_device) hard.push_back("the block's weights span several devices (mirrors need whole blocks)");
  if (in.devices.empty()) hard.push_back("no devices");
  if (!hard.empty()) {
    if (expl) plan.refusals = hard;
    else
      for (auto& h : hard) plan.notes.push_back("serial: " + h);
    return serial(plan);
  }
  if (in.phase == Phase::Tune && in.gradient_accumulate_steps > 1) {
    plan.notes.push_back("serial: gradient_accumulate_steps " + std::to_string(in.gradient_accumulate_steps) +
                         " > 1 is tuned serially");
    return serial(plan);
  }
  std::vector<Device> fit;
  std::vector<std::string> dropped;
  for (const auto& d : in.devices) {
    if (d.free_bytes >= in.mirror_bytes) fit.push_back(d.device);
    else dropped.push_back(d.device.str() + ": a mirror needs " + mib(in.mirror_bytes) + ", " + mib(d.free_bytes) + " free");
  }
  if (expl && int(fit.size()) < in.setting.world) {
    plan.refusals.push_back("--parallel_quantization " + std::to_string(in.setting.world) + " needs " +
                            std::to_string(in.setting.world) + " devices with room for a mirror; " +
                            std::to_string(fit.size()) + " of " + std::to_string(in.devices.size()) + " qualify");
    plan.refusals.insert(plan.refusals.end(), dropped.begin(), dropped.end());
    return serial(plan);
  }
  for (auto& d : dropped) plan.notes.push_back("dropped " + d);
  const int want = expl ? in.setting.world : int(fit.size());
  const bool det_tune = in.phase == Phase::Tune && in.deterministic;
  if (expl && det_tune && want <= in.items && (!pow2(want) || in.items % want)) {
    plan.refusals.push_back("--parallel_quantization " + std::to_string(want) +
                            " with --deterministic true needs a power of two dividing the global batch " +
                            std::to_string(in.items) + " (or --deterministic false)");
    return serial(plan);
  }
  const int world = usable_world(want, in);
  if (world < want) {
    const char* what = in.phase == Phase::Tune ? "global batch" : in.phase == Phase::Search ? "modules" : "samples";
    plan.notes.push_back("world " + std::to_string(want) + " demoted to " + std::to_string(world) + " (" +
                         std::to_string(in.items) + " " + what +
                         (in.phase == Phase::Tune && in.deterministic ? "; deterministic tuning needs a power of two "
                                                                         "dividing the batch)"
                                                                       : ")"));
  }
  if (world < 2) return serial(plan);
  plan.world = world;
  plan.devices.assign(fit.begin(), fit.begin() + world);
  for (int r = 0; r < world; ++r) {
    if (in.phase == Phase::Tune) {
      const int64_t B = in.items, n = in.nsamples;
      const int64_t j0 = B * r / world, j1 = B * (r + 1) / world;
      plan.ranges.push_back({j0 * n / B, j1 * n / B});
    } else {
      plan.ranges.push_back({in.items * r / world, in.items * (r + 1) / world});
    }
  }
  return plan;
}

}  // namespace ar::parallel
