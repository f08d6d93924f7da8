// SignRound on one Linear outside the decoder blocks (lm_head with --quant_lm_head), as AutoRound's
// layer-wise path: the wrapped Linear sees the quantized chain's input and is tuned towards the FP
// Linear on the FP chain's input:
//   L = sum over valid rows r of the batch, columns o of (x_in[r] W^[o] - x_fp[r] W[o])^2 / (rows * out)
// with the same sampler, learning rates, sign-SGD step and best-iterate rule as the block tuner.
// Targets are computed per batch (never stored: [tokens, vocab] would not fit), in row chunks so a
// chunk of outputs stays near 64 MiB. iters = 0 is RTN. Serial (the lane does not shard it).
#pragma once
#include "quant/signround.h"

namespace ar::quant {

// x_in, x_fp: [n, T, in] (already through the final norm); loss_mask: [n * T]. `w` is replaced by
// its QDQ value; the result's layers[0] holds scale/zero for packing. FP8_STATIC (fmt.act_static()):
// act_max is the maximum |x_in|; the wrapped Linear reads x_in through its activation QDQ, the
// coefficient of act_max is tuned as in the blocks, and layers[0].input_scale is set.
BlockTuneResult signround_tune_linear(Context& ctx, const std::string& name, Tensor& w, const QuantFormat& fmt,
                                      const Tensor& x_in, const Tensor& x_fp, int64_t T,
                                      const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                      float act_max = 0);

}  // namespace ar::quant
