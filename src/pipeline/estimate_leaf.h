// The start estimate's measured tuning leaf (issue 22): one of the run's blocks, tuned for a few
// SignRound iterations on the run's first calibration samples with the run's format and options, on
// the run's context. It prices what the FLOP model cannot: the QDQ, the step, the norms, attention's own
// loops and the bf16 conversions, whose share of an iteration grows as the GEMMs get faster (amp) or
// shorter (small widths). Real weights and inputs matter for a MoE block: its router decides how the
// rows spread over the experts (a random router spread them evenly; a generated Qwen3-MoE's run was
// priced -23% with one, +20% with its own first block, whose routing is that block's).
//
// Two batch sizes, 1 sample and the run's batch (at least 2), of the run's T tokens, separate an
// iteration into
//   seconds = fixed_s + per_sample_s * samples
// where fixed_s is the per-weight work (QDQ forward and backward, the step, the best-iterate copy) and
// per_sample_s the forward + backward of one sample. The run's own batch is measured, so an iteration
// is not extrapolated, and the leaf holds no more samples than the run will. A sample has the
// run's full length (a shorter one runs its GEMMs at another efficiency: scaled by FLOPs, it missed by
// +75-110%), so the caller measures a leaf only where it costs a small share of the run (leaf_flops).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/context.h"
#include "model/block_dims.h"
#include "model/loader.h"
#include "quant/signround.h"

namespace ar {

struct LeafTimes {
  double fixed_s = 0, per_sample_s = 0;
  double wall_s = 0;  // what the measurement took
};

// Forward + backward FLOPs of one sample of T tokens through a block (its Linears, a MoE block's
// active ones, and causal attention), as run_work counts them.
double sample_flops(const BlockDims& d, int64_t T);
// The leaf's batch for a run's (it measures 1 sample and this many), and an upper bound of its work:
// 4 iterations of each.
int64_t leaf_samples(int64_t run_batch);
double leaf_flops(const BlockDims& d, int64_t T, int64_t samples);

// The tuner a leaf runs: w tuned on inputs x (also the targets) with options o, its progress callback
// called after each iteration's work is done. Empty: the CPU's signround_tune_block on the leaf's
// context; `quantize --device cuda:N` passes the GPU's (pipeline/gpu_tuner.h).
using LeafTuner = std::function<void(BlockWeights& w, const quant::SignRoundOptions& o, const Tensor& x,
                                     const std::vector<uint8_t>& mask)>;

// Measures the leaf: `block` (of shapes `d`, consumed) tuned with `tune`'s
// options (amp, minmax tuning, best-iterate rule, ...; iters, batch and callbacks are the leaf's own) on
// the first samples of x ([rows, T, C], as the run stores its calibration inputs; cycled when it has
// fewer), by `tuner`. Takes 4 iterations of `samples` samples and 4 of one; the tuning state and its
// cached buffers (the context's allocator) are freed before it returns.
LeafTimes measure_leaf(Context& ctx, const BlockDims& d, BlockWeights block, const quant::QuantFormat& fmt,
                       const quant::SignRoundOptions& tune, const BlockAux<float>& aux, const Tensor& x,
                       int64_t samples, const LeafTuner& tuner = {});

// The start estimate's measured pass (issue 54, item 7): seconds per sample of `block` run forward over
// the first samples of x (one to warm up, then up to 8 timed), one sample per micro-batch as the run's
// collection passes do, with the imatrix statistics when a track asks for them. The sweep's fixed work
// (the weights' bf16 copies) is counted per sample: a two-point fit of 1 and 4 samples was noisier than
// that share. It reads 8-14% below the run's own passes (docs/benchmarks.md, "The start estimate of the
// searches"); priced by FLOPs at a tuning iteration's GEMM share instead, the FP pass of a 135M-shaped
// model at seqlen 2048 was off by +40%.
double measure_pass(Context& ctx, const BlockDims& d, const BlockWeights& block, const BlockAux<float>& aux,
                    const Tensor& x, bool amp, bool imatrix);

// The two-point fit of the measured iteration times (t1 of 1 sample, tn of n); the slope is floored
// at a tenth of tn's per-sample share so that noise cannot make a sample free.
LeafTimes fit_leaf(double t1, double tn, int64_t n);

}  // namespace ar
