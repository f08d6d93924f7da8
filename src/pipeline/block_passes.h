// The per-block passes of the quantization run that do not tune, sharded over the lane's ranks:
//   collection: the block over every calibration sample (FP reference outputs, the quantized-input
//     chain) with optional imatrix statistics. Rank r runs samples [r n / W, (r+1) n / W) on a
//     short-lived mirror (rank 0 on the home block). Outputs are per sample, so they do not depend on
//     the world; imatrix sums are kept per sample and added in sample order on the home side, so they
//     do not either (statistics merge: sums add).
//   search (--iters 0): optimized RTN (imatrix given) or plain RTN of each module once, modules
//     [r M / W, (r+1) M / W) on rank r; the result replaces the home block's weight. Per-module results
//     equal the serial run exactly.
// lane.world <= 1 (or no group) runs everything on the home context.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "quant/signround.h"

namespace ar {

// imatrix of a block: sum over calibration tokens of x^2 per input channel of each Linear, keyed by
// the input it sees (stat_inputs): attn_in (q/k/v; MLA: q_a or q, and kv_a; Gated DeltaNet's
// in_proj_qkvz), MLA's q_b_in and kv_b_in, o_in (Gated DeltaNet: out_proj's, the gated norm's output), mlp_in (gate/up; in a MoE block the router's and the shared expert's input), down_in; a MoE
// block's expert e: expert.<e>.in (gate/up, its routed tokens) and expert.<e>.down; the shared expert's
// down_proj: shared.down. An expert that receives no token gets ones (AutoRound's hooks never fire for
// it, and its search then weighs every channel 1).
using Imatrix = std::map<std::string, std::vector<float>>;
// The imatrix entry a Linear (short name, e.g. mlp.down_proj) sees.
const std::vector<float>& imatrix_for(const Imatrix& im, const std::string& linear);
// The input key of a Linear's short name (mlp.experts.3.down_proj -> expert.3.down).
std::string linear_input_key(const std::string& linear);

// The statistics keys of a block and their widths (input features), in a fixed order.
struct StatInput {
  std::string key;
  int64_t width;
};
std::vector<StatInput> stat_inputs(const BlockDims& dims);

// Static activation statistics of a block (QuantFormat::act_static): the maximum |x| over every
// calibration token of each Linear input, keyed as the imatrix. Folded by max over the lane's ranks
// and the job's processes, so it does not depend on the world.
using ActMax = std::map<std::string, float>;

// What a collection pass gathers besides its outputs (null: not asked for). `routed`: a MoE block's
// token count per expert over the whole pool (a token counts once for each expert it is routed to).
struct PassStats {
  Imatrix* imatrix = nullptr;
  ActMax* act_max = nullptr;
  std::vector<int64_t>* routed = nullptr;
};

// x, y: [n, T, C] fp32 or bf16 (converted per micro-batch). amp: bf16 GEMM operands (cpu_ops.h).
// In a multi-process job (lane.procs) x and y hold this process's shard, and the statistics are the
// whole pool's: every process's per-sample imatrix sums are gathered and added in sample order, as
// serially; maxima fold by max and counts add. `act`: the Linears read their inputs through FP8_STATIC's
// activation QDQ (a quantized chain whose block was tuned with it).
void block_forward_all(Context& home, const quant::TuneLane& lane, const BlockDims& dims, const BlockWeights& w,
                       BlockAux<float> aux, const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp,
                       const PassStats& stats = {}, const ActQdq<float>* act = nullptr);

// The activation scales of a tuned block's Linears (TunedLinear::input_scale) by linear_slot of w.
ActQdq<float> block_act_qdq(const quant::BlockTuneResult& tr, const BlockWeights& w);

// --iters 0 of the selected Linears, each in its format: optimized RTN (imatrix-weighted symmetric
// scale search) when `im` is given and the Linear's format has one, else plain RTN (min/max scale,
// rounding to nearest). In a multi-process job process p
// searches modules [p M / P, (p + 1) M / P) (serially, on `home`) and each module's result is broadcast
// from the process that searched it.
// Whether the optimized-RTN search exists for `f` (symmetric int below 8 bits, the float families that
// have one).
bool has_opt_rtn(const quant::QuantFormat& f);
quant::BlockTuneResult rtn_block(Context& home, const quant::TuneLane& lane, BlockWeights& w,
                                 const quant::LayerFormats& selected, const Imatrix* im);

}  // namespace ar
