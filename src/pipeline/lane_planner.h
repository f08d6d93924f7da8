// The quantization run's view of the data-parallel lane: builds the devices' replica group once per
// run (`--parallel_quantization`, `--devices`) and turns each block phase into a TuneLane through the
// resolver (parallel/plan.h). Refusals stop the run with every reason; notes (demotions, serial
// fallbacks of `auto`) are logged and reported once each.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "parallel/plan.h"
#include "pipeline/quantize.h"

namespace ar {

class LanePlanner {
 public:
  // `notes` collects the report's notes; it must outlive the planner.
  LanePlanner(const QuantizeOptions& opt, Device home, int64_t nsamples, std::vector<std::string>& notes);
  // items: samples (collection), modules (search) or the global batch (tuning).
  quant::TuneLane lane(parallel::Phase phase, int64_t items, size_t mirror_bytes);
  // The start summary's line for a phase: serial, or the replicas with their item ranges. Refusals
  // stop the run here, before any work.
  std::string plan_line(parallel::Phase phase, int64_t items, size_t mirror_bytes);

 private:
  parallel::Plan resolve(parallel::Phase phase, int64_t items, size_t mirror_bytes);
  const QuantizeOptions& opt_;
  Device home_;
  int64_t nsamples_;
  std::vector<std::string>& notes_;
  std::set<std::string> logged_;
  std::vector<parallel::DeviceInfo> devices_;
  std::unique_ptr<parallel::ReplicaGroup> group_;
};

}  // namespace ar
