// How the floating-point schemes (quant/qdq_fp.h) are written (autoround-spec.md §8): the tensors of a
// compressed-tensors checkpoint, which vLLM and transformers load, for --format llm_compressor (formats
// nvfp4-pack-quantized, mxfp4-pack-quantized, mxfp8-quantized, and naive-quantized for FP8 weights with
// 16-bit activations, as AutoRound writes FPW8A16), and
// the same tensors under AutoRound's own quantization_config for --format auto_round (its
// "auto_round:llm_compressor" packing; MX and NVFP4 only, as AutoRound writes them).
//   MXFP4  weight_packed U8 [out, in/2] (E2M1 codes, element 2k in the low nibble), weight_scale U8
//          [out, in/32] (E8M0: the tile exponent + 127)
//   MXFP8  weight F8_E4M3 [out, in], weight_scale U8 [out, in/32]
//   NVFP4  weight_packed U8 [out, in/2], weight_scale F8_E4M3 [out, in/16] (S), weight_global_scale F32 [1] (G)
//   FP8    weight F8_E4M3 [out, in], weight_scale F32: [out, 1] per channel, [1] per tensor,
//          [ceil(out/128), ceil(in/128)] per block, in fp32 as AutoRound writes them, so that
//          e4m3 * scale is the tuned QDQ value exactly. FP8_STATIC adds input_scale F32 [1] (the
//          static activation scale, "float-quantized" with tensor-wise input_activations; in
//          auto_round's "auto_round:fp8_static" the channel scale is [out]).
// Decoded as compressed-tensors decodes (model/dequant_float.h) every element equals the tuned QDQ
// weight, except NVFP4's, which decodes as q * (S / G) where the QDQ has q * (1 / (1 / (S * (1 / G)))):
// the two fp32 results can differ in the last bit.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "export/shard_writer.h"
#include "pipeline/export_format.h"
#include "pipeline/quantize.h"

namespace ar {

// A float scheme's options (QuantizeOptions::fmt.fp): the tiles AutoRound has, and what this build
// tunes of them (InvalidInput / Unsupported naming the option otherwise).
void check_float_scheme(const QuantizeOptions& opt);

// Is `format` one that writes the float schemes, and can it hold `fmt`? InvalidInput naming the
// format otherwise (an int format with float weights, or llm_compressor with int weights).
void check_float_format(const std::string& format, const quant::QuantFormat& fmt);

// Packs one tuned float Linear (L.fp set; L.weight its QDQ value, L.scale the tile scales) under `prefix`,
// with its input_scale when it has one (FP8_STATIC). flat_channel_scale: an FP8 per-channel scale as
// [out] (AutoRound's auto_round:fp8_static), not compressed-tensors' [out, 1].
void pack_float_linear(Context& ctx, ShardWriter& w, const std::string& prefix, const quant::TunedLinear& L,
                       bool flat_channel_scale = false);

// config.json's "quantization_config" of a float-scheme output; `extra` names the Linears kept in 16
// bit (compressed-tensors: the `ignore` list, with lm_head unless it is quantized).
nlohmann::ordered_json float_quantization_config(const QuantizeOptions& opt, bool lm_head_q,
                                                 const nlohmann::ordered_json& extra, const ConfigNames& names = {});

// AutoRound's data_type of the scheme ("mx_fp", "mx_fp_rceil", "nv_fp", "fp").
std::string float_data_type(const quant::QuantFormat& fmt);

// The scheme's name in logs and errors ("MXFP4", "NVFP4", "FP8 per channel", ...).
std::string float_scheme_name(const quant::QuantFormat& fmt);

}  // namespace ar
