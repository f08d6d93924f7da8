// The start estimate's measured search (issue 54, item 7): the time a track's per-block search takes
// (--iters 0's RTN / optimized RTN of the int and float schemes, a GGUF preset's scale search, which
// also fixes a tuned GGUF block's scales before SignRound), measured on a slice of one block's rows
// and scaled to the whole block. The FLOP model and the tuning leaf (run_estimate.h, estimate_leaf.h)
// price matrix products and SignRound iterations; a search is neither (the optimized-RTN search of a
// 135M model took 70 s of a 72 s run that the FLOP model priced at 2 s).
//
// Every search here works row by row (each output row's groups are searched on their own), so its time
// is proportional to the rows searched: the probe searches the first rows of every selected Linear,
// a growing share of them (1/64, 1/16, 1/4, all) until one search takes at least kMinProbeSeconds,
// and scales that time by the share. It costs at most about 1.4 x kMinProbeSeconds x 4 beyond a block
// whose whole search is shorter.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "model/loader.h"
#include "pipeline/scheme_track.h"

namespace ar {

inline constexpr double kMinProbeSeconds = 0.1;

struct SearchProbe {
  double block_s = 0;  // one block's search, scaled to all of its rows
  double share = 0;    // the share of the Linears' elements the last measurement searched
  double wall_s = 0;   // what the probe took
};

// A copy of `w` whose Linears (quant::block_linears) hold only their first ceil(rows x share) rows
// (at least one); the other tensors are shared with `w`. `kept`: the share of the Linears' elements
// the copy holds (above `share` where rounding up keeps more).
BlockWeights first_rows(Context& ctx, const BlockWeights& w, double share, double* kept = nullptr);

// Times `search` (a track's search of the given block, which it may overwrite) on growing row slices of
// `block` as described above.
SearchProbe measure_search(Context& ctx, const BlockWeights& block, const std::function<void(BlockWeights&)>& search);

// The run's searches priced: each track that searches every block (SchemeTrack::searches_every_block),
// probed on `block` (block `layer` of the model, its Linears chosen by the track; an imatrix of ones
// where the track's search weighs by one), times `blocks` blocks, over `processes` processes (each
// searches its share of the Linears).
struct SearchPrice {
  double seconds = 0;
  std::string what;  // for the estimate line; "" when no track searches
};
SearchPrice price_searches(Context& ctx, const std::vector<std::unique_ptr<SchemeTrack>>& tracks,
                           const BlockWeights& block, const BlockDims& dims, int64_t layer, int64_t blocks,
                           int processes);

}  // namespace ar
