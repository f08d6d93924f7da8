// The start summary's time estimate (issue 11, item 2; issue 22). A SignRound run on the CPU is priced
// by a measured tuning leaf (pipeline/estimate_leaf.h: one of its blocks on its first samples): the run's iterations at the
// leaf's seconds per iteration, plus its forward-only passes at a third of a sample's forward +
// backward. Everything else (RTN and --iters 0 searches, GPU tuning, multi-process jobs, and runs so
// short that the leaf would cost more than 15% of them) by the FLOP model; searches (--iters 0, GGUF's
// scales) by a probe of one block (pipeline/estimate_search.h), added to either:
// two kinds of work counted from the model's shapes and the options, each at a rate of this machine
// measured at the start:
//   - matrix products (the Linears, QK^T and PV) at the block-shaped GEMM rate, times the share of it
//     a whole tuning iteration reaches (bench/tune_bench: ~75%);
//   - attention score elements (softmax forward and backward, masks: elementwise work that
//     dominates small models with long sequences), at the measured exp rate of all threads divided by
//     the cost of one score element in exps (calibrated on stories260K at seqlen 512).
// The ETA during block 1 replaces it with measured time.
#pragma once
#include <string>

#include "core/context.h"
#include "model/config.h"
#include "pipeline/estimate_leaf.h"
#include "pipeline/estimate_search.h"
#include "pipeline/quantize.h"

namespace ar {

struct RunWork {
  double gflop = 0;          // matrix products
  double score_giga = 0;     // attention score elements (forward + backward passes), in 1e9
  double iterations = 0;     // SignRound iterations over the run (blocks x tunings x iters)
  double batch = 0;          // samples per iteration
  double pass_samples = 0;   // samples through forward-only passes (FP targets, q-chains)
  double tune_gflop = 0, tune_score_giga = 0;  // the SignRound iterations' share of gflop and score_giga
  int64_t T = 0;
};

// What the start measured besides the machine's rates: a collection pass of one block, the searches.
struct StartProbes {
  double pass_sample_s = 0;  // measure_pass (0: not measured, the passes priced by FLOPs)
  SearchPrice search;
};
// The run's work: per block (a MoE block's active weights: router, top_k experts, shared expert), the FP pass (and with SignRound the q-chain pass) over every sample and,
// with SignRound, `iters` forward + backward passes over a batch (backward = 2 forward). `blocks` of
// the model's; `tunings` per block (2: int formats and a GGUF preset), each with its q-chain pass.
RunWork run_work(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples, int64_t seqlen, int64_t blocks,
                 int tunings = 1);

struct MachineRates {
  double gemm_gflops = 0;  // block-shaped GEMM (amp: bf16 operands, fp32 accumulation), best of 3
  double exp_giga = 0;     // exps per second on all `threads`, in 1e9
};
// Measured now (~0.1 s): a [512 x hidden] x [hidden x intermediate] product (capped at 2048 x 4096)
// and the softmax's exp kernel.
MachineRates measure_rates(Context& ctx, const ModelConfig& cfg, bool amp);

double estimate_seconds(const RunWork& w, const MachineRates& r, const StartProbes& probes = {});
// The leaf's price of the run (its passes at a third of the leaf's sample unless the pass was measured).
double estimate_seconds(const RunWork& w, const LeafTimes& leaf, const StartProbes& probes = {});

// "estimated time: ~1 h 05 min (...)" for the log, the searches' price added.
std::string time_estimate_line(const RunWork& w, const MachineRates& r, bool amp, const StartProbes& probes);
std::string time_estimate_line(const RunWork& w, const LeafTimes& leaf, int64_t block,  // block: 0-based
                               const StartProbes& probes);
// Whether the leaf is worth measuring: at most kLeafShareOfRun of the run's matrix products.
inline constexpr double kLeafShareOfRun = 0.15;
bool leaf_worthwhile(const RunWork& w, const BlockDims& d);

// 3725 -> "1 h 02 min", 95 -> "1 min 35 s", 12.3 -> "12 s".
std::string human_duration(double seconds);

}  // namespace ar
