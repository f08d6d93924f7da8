// The start summary's time estimate (issue 11, item 2): the run's GEMM work counted from the model's
// shapes and the options, divided by this machine's GEMM rate measured at the start on a block-shaped
// product, at the share of that rate a whole tuning iteration reaches (bench/tune_bench measures ~75%
// on the reference machine; attention, QDQ, norms and the step make up the rest). The ETA during
// block 1 replaces it with measured time.
#pragma once
#include <string>

#include "core/context.h"
#include "model/config.h"
#include "pipeline/quantize.h"

namespace ar {

// GFLOP of the run's matrix products: per block, the FP and q-chain passes over every sample and, with
// SignRound, `iters` forward + backward passes over a batch (backward = 2 forward).
double run_gflop(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples, int64_t seqlen);

// This machine's GEMM rate now, in GFLOP/s (amp: bf16 operands, fp32 accumulation), on a
// [512 x hidden] x [hidden x intermediate] product (capped at 2048 x 4096), best of 3.
double measure_gemm_gflops(Context& ctx, const ModelConfig& cfg, bool amp);

// "estimated time: ~1 h 05 min (...)" for the log.
std::string time_estimate_line(double gflop, double gemm_gflops, bool amp);

// 3725 -> "1 h 02 min", 95 -> "1 min 35 s", 12.3 -> "12 s".
std::string human_duration(double seconds);

}  // namespace ar
