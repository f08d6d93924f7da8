// A MoE layer's feed-forward tensors, from either checkpoint layout (model/moe_names.h). A fused expert
// tensor is read one expert at a time (each expert's gate, up and down rows are contiguous), so the
// block materializes in fp32 without a second copy of the stacked tensor.
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

void HfModel::load_moe(int64_t layer, BlockWeights& w, Context& ctx) const {
  const int64_t C = cfg_.hidden_size, E = cfg_.moe.num_experts, I = cfg_.moe.expert_intermediate,
                Is = cfg_.moe.shared_intermediate;
  const bool fused = fused_experts(layer);
  w.mixtral_names = cfg_.moe.mixtral_names;
  w.router = load(router_weight_name(cfg_, layer, fused), {E, C}, ctx);
  if (fused) {  // shapes were checked when the model was opened (model_check.cpp)
    const std::string gu = fused_experts_name(layer, ExpertProj::Gate), dn = fused_experts_name(layer, ExpertProj::Down);
    for (int64_t e = 0; e < E; ++e) {
      w.eg.push_back(load_slice(gu, e * 2 * I * C, {I, C}, ctx));
      w.eu.push_back(load_slice(gu, e * 2 * I * C + I * C, {I, C}, ctx));
      w.ed.push_back(load_slice(dn, e * C * I, {C, I}, ctx));
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      w.eg.push_back(load(expert_weight_name(cfg_, layer, e, ExpertProj::Gate), {I, C}, ctx));
      w.eu.push_back(load(expert_weight_name(cfg_, layer, e, ExpertProj::Up), {I, C}, ctx));
      w.ed.push_back(load(expert_weight_name(cfg_, layer, e, ExpertProj::Down), {C, I}, ctx));
    }
  }
  if (Is) {
    w.sg = load(shared_expert_name(layer, ExpertProj::Gate), {Is, C}, ctx);
    w.su = load(shared_expert_name(layer, ExpertProj::Up), {Is, C}, ctx);
    w.sd = load(shared_expert_name(layer, ExpertProj::Down), {C, Is}, ctx);
    w.sgate = load(shared_gate_name(layer), {1, C}, ctx);
  }
}

}  // namespace ar
