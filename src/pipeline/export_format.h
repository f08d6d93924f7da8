// How each --format writes a tuned Linear and the quantization_config (autoround-spec.md §8).
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "export/shard_writer.h"
#include "pipeline/quantize.h"

namespace ar {

// Packs one tuned Linear (weight = its QDQ value; scale/zero per group) under `prefix`:
// GPTQ layout qweight [in*b/32, out], qzeros [groups, out*b/32], scales fp16 [groups, out] (+ g_idx),
// zero points stored minus one when `zero_minus_one`; or the AWQ layout (`awq`).
void pack_linear(Context& ctx, ShardWriter& w, const std::string& prefix, const quant::TunedLinear& L, bool sym,
                 bool zero_minus_one, bool g_idx, bool awq);

// The module names a quantization_config uses (transformers' names of the model it builds:
// model/name_map.h): the decoder blocks, and the top-level modules outside the language model (a
// multimodal checkpoint's vision_tower, multi_modal_projector), which every format marks as never converted.
struct ConfigNames {
  std::string layers = "model.layers";
  std::vector<std::string> foreign;
};

// config.json's "quantization_config" for opt.format; `extra` holds per-layer overrides (16-bit layers,
// a quantized lm_head), `awq` the AWQ packing of auto_round asym 4-bit, `in_block` the Linears (names
// inside a block, e.g. mlp.down_proj) quantized in some block: auto_gptq lists them as
// modules_in_block_to_quantize when any Linear of a block stays in 16 bit, as AutoRound does
// (optimum/transformers honour that list and ignore gptqmodel's `dynamic` exclusions).
nlohmann::ordered_json quantization_config(const QuantizeOptions& opt, bool awq, bool lm_head_q,
                                           const nlohmann::ordered_json& extra, const std::set<std::string>& in_block,
                                           const ConfigNames& names = {});

}  // namespace ar
