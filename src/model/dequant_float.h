// Linears stored in a float scheme (QuantConfig::fp: MXFP4, MXFP8, NVFP4, FP8), read back to fp32 the
// way compressed-tensors decompresses them for transformers, so `eval` scores what a serving engine
// loads:
//   MXFP4  e2m1(code) * 2^(e8m0 - 127)                     exact (both fit bf16)
//   MXFP8  e4m3(weight) * 2^(e8m0 - 127)                   rounded to bf16
//   NVFP4  bf16(e2m1(code) * (e4m3(weight_scale) / weight_global_scale))   (fp32 products, as torch)
//   FP8    e4m3(weight) * weight_scale                     one fp32 product; per channel, per tensor or
//                                                          per block (transformers' fine-grained FP8,
//                                                          quant_method fp8, names it weight_scale_inv)
// FP8 is what compressed-tensors' forward reads in an fp32 model (transformers' default load): the
// scale (F32, BF16 or F16) is widened to fp32 and the product rounded once to fp32, never to bf16.
// Packed E2M1 pairs hold element 2k in the low nibble and 2k+1 in the high one. A Linear of an
// ignored layer is stored dense (".weight" in F32/BF16/F16) and is read as such.
#pragma once
#include <string>

#include "model/block_impl.h"
#include "model/loader.h"

namespace ar {

// Is the Linear `prefix` ("model.layers.0.self_attn.q_proj") of shape `expect` stored in the model's
// float scheme? Checks the dtype and shape of every part, failing with the file and tensor named;
// false when it is stored dense.
bool check_float_linear(const HfModel& m, const std::string& prefix, const Shape& expect);

// The fp32 weight of a Linear for which check_float_linear is true; a non-finite result (a NaN code,
// an E8M0 255, a zero global scale) is refused naming the tensor.
Tensor dequantize_float_linear(const HfModel& m, const std::string& prefix, const Shape& expect, Context& ctx);

// What a stored tensor is in a model with FP8 weights (QuantConfig::fp Fp8), read as a quantization
// source: a Linear's E4M3 weight (copied into an output dequantized, in bf16), its scale (dropped:
// only the dequantization reads it) or anything else (None; also for every tensor of other models).
enum class Fp8Part { None, Weight, Scale };
Fp8Part fp8_part(const HfModel& m, const std::string& name);

// FP8_STATIC (QuantConfig::act_static): the static activation scale of a Linear stored in the float
// scheme, "<prefix>.input_scale" (F32, BF16 or F16, [1] or []); missing, non-finite or not positive is
// refused naming the tensor. 0 for a Linear stored dense (a layer kept in 16 bit reads its input as is).
float static_input_scale(const HfModel& m, const std::string& prefix, const Shape& expect);

// The static activation scales of a block's Linears in BlockRunner's slot order (all 0 without
// act_static).
ActQdq<float> block_input_scales(const HfModel& m, int64_t layer);

}  // namespace ar
