// What a MoE layer's checkpoint layout needs of the loader (model/moe_names.h): which layout a layer has,
// Mixtral's spelling, and a fused expert tensor read one expert at a time (each expert's gate, up and down
// rows are contiguous), so the block materializes in fp32 without a second copy of the stacked tensor.
#include "core/error.h"
#include "model/loader.h"
#include "model/moe_names.h"

namespace ar {

bool HfModel::fused_experts(int64_t layer) const { return has(fused_experts_name(layer, ExpertProj::Gate)); }

// A Mixtral checkpoint spells its experts' Linears w1/w3/w2 (the original checkpoints) unless its first
// MoE layer's expert 0 is stored as gate_proj (plain, GPTQ-packed or compressed-tensors-packed: a quantized
// Mixtral as AutoRound writes it).
void HfModel::detect_mixtral_spelling() {
  if (!cfg_.moe.mixtral_names) return;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    if (!cfg_.is_moe_layer(l)) continue;
    const std::string p = layer_prefix(l) + "block_sparse_moe.experts.0.gate_proj.";
    cfg_.moe.mixtral_w_names = !(has(p + "weight") || has(p + "qweight") || has(p + "weight_packed"));
    return;
  }
}

Tensor HfModel::load_slice(const std::string& name, int64_t offset, const Shape& shape, Context& ctx) const {
  std::string file;
  const StTensorInfo* t = source_ ? nullptr : info(name, &file);
  if (!t) fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + name + "' is missing");
  return shards_[where_.at(name)]->load_f32_range(name, offset, shape, ctx);
}

}  // namespace ar
