// The resolver: one pure function decides, per block and phase, how the work parallelizes: the world,
// its devices and each rank's contiguous range of items, or why it cannot (RFC "engagement rules").
//   off                  -> world 1, no notes.
//   hard requirements    -> home device supported and of the devices' kind, single process, flat
//                           calibration pool, block whole on one device. Unmet: an explicit N is
//                           refused with every reason; auto runs serial and logs them.
//   tuning with GAS > 1  -> serial through the same gate (note).
//   memory               -> each device's free bytes must cover the mirror price; auto keeps the devices
//                           that fit, an explicit N that does not fit on N devices is refused.
//   items                -> world <= items (tuning: the global batch; deterministic tuning: a power of
//                           two dividing the batch, so the reduction tree is the same for every world);
//                           a smaller world is a demotion (note), world 1 is serial. An explicit N that
//                           the batch could hold but is not such a power of two is refused.
// Ranges: collection and searches split [0, items) evenly; tuning gives rank r the batch strata
// [r B / W, (r+1) B / W) of the stratified sampler, i.e. pool samples [S(rB/W), S((r+1)B/W)) with
// S(j) = j n / B, so the global batch is the serial one for every world.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"

namespace ar::parallel {

struct ParallelSetting {
  static constexpr int kMaxWorld = 1024;  // replicas of one process's lane
  enum Mode { Off, Auto, Explicit } mode = Off;
  int world = 1;  // Explicit only
  static ParallelSetting parse(const std::string& s);  // "off" | "auto" | N >= 1
  std::string str() const;
};

enum class Phase { Collect, Search, Tune };

struct DeviceInfo {
  Device device;
  size_t free_bytes = 0;
};

// Bytes one mirror of a block needs during tuning.
struct MirrorPrice {
  size_t weights = 0, tuning = 0, activations = 0, margin = 0;
  size_t total() const { return weights + tuning + activations + margin; }
};
// weights: every block tensor in fp32; tuned: elements of the quantized Linears; tuning state per
// tuned element: V, QDQ weight, its gradient, best-iterate snapshot, gradient tree levels (fp32) and
// the int8 signs; activations: the block's forward cache for one leaf of `leaf_samples` samples.
MirrorPrice price_mirror(int64_t weight_elems, int64_t tuned_elems, int tree_levels, int64_t cache_elems_per_sample,
                         int64_t leaf_samples);

struct PlanInput {
  ParallelSetting setting;
  Phase phase = Phase::Tune;
  Device home;
  bool home_supported = true;  // the home device has a backend in this binary
  std::vector<DeviceInfo> devices;
  bool multiprocess_active = false;
  bool flat_pool = true;
  bool block_on_one_device = true;
  int gradient_accumulate_steps = 1;
  bool deterministic = true;
  int64_t items = 0;     // Collect: samples; Search: modules; Tune: global batch
  int64_t nsamples = 0;  // Tune: pool size
  size_t mirror_bytes = 0;
};

struct Plan {
  int world = 1;
  std::vector<Device> devices;                       // one per rank
  std::vector<std::pair<int64_t, int64_t>> ranges;   // per rank: [begin, end) of items / pool samples
  std::vector<std::string> refusals;                 // non-empty: the run stops with these
  std::vector<std::string> notes;                    // demotions and serial reasons, for the log
  bool refused() const { return !refusals.empty(); }
  bool parallel() const { return world > 1; }
};

Plan resolve_plan(const PlanInput& in);

}  // namespace ar::parallel
