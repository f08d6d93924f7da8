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
// the input it sees: attn_in (q/k/v), o_in, mlp_in (gate/up), down_in.
using Imatrix = std::map<std::string, std::vector<float>>;
// The imatrix entry a Linear (short name, e.g. mlp.down_proj) sees.
const std::vector<float>& imatrix_for(const Imatrix& im, const std::string& linear);
// The input key (attn_in, o_in, mlp_in, down_in) of a Linear's short name.
const char* linear_input_key(const std::string& linear);

// Static activation statistics of a block (QuantFormat::act_static): the maximum |x| over every
// calibration token of each Linear input, keyed as the imatrix. Folded by max over the lane's ranks
// and the job's processes, so it does not depend on the world.
using ActMax = std::map<std::string, float>;

// x, y: [n, T, C] fp32 or bf16 (converted per micro-batch). amp: bf16 GEMM operands (cpu_ops.h).
// In a multi-process job (lane.procs) x and y hold this process's shard, and the imatrix is the sum over
// the whole pool: every process's per-sample sums are gathered and added in sample order, as serially;
// likewise `amax` is the whole pool's. `act`: the Linears read their inputs through FP8_STATIC's
// activation QDQ (a quantized chain whose block was tuned with it).
void block_forward_all(Context& home, const quant::TuneLane& lane, const BlockDims& dims, const BlockWeights& w,
                       BlockAux<float> aux, const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp,
                       Imatrix* imat = nullptr, ActMax* amax = nullptr, const ActQdq<float>* act = nullptr);

// The activation scales of a tuned block's Linears (TunedLinear::input_scale) in block slot order.
ActQdq<float> block_act_qdq(const quant::BlockTuneResult& tr);

// --iters 0 of the selected Linears: optimized RTN (imatrix-weighted symmetric scale search) when `im`
// is given, else plain RTN (min/max scale, rounding to nearest). In a multi-process job process p
// searches modules [p M / P, (p + 1) M / P) (serially, on `home`) and each module's result is broadcast
// from the process that searched it.
quant::BlockTuneResult rtn_block(Context& home, const quant::TuneLane& lane, BlockWeights& w,
                                 const quant::QuantFormat& fmt, const Imatrix* im,
                                 const std::function<bool(const std::string&)>& quantize_layer);

}  // namespace ar
