#include "model/moe_names.h"

#include "model/loader.h"

namespace ar {

namespace {
const char* proj_name(ExpertProj p, bool mixtral) {
  switch (p) {
    case ExpertProj::Gate: return mixtral ? "w1" : "gate_proj";
    case ExpertProj::Up: return mixtral ? "w3" : "up_proj";
    case ExpertProj::Down: return mixtral ? "w2" : "down_proj";
  }
  return "";
}
}  // namespace

std::string expert_linear_name(bool mixtral_names, int64_t expert, ExpertProj proj) {
  return std::string(mixtral_names ? "block_sparse_moe" : "mlp") + ".experts." + std::to_string(expert) + "." +
         proj_name(proj, false);
}

std::string shared_linear_name(ExpertProj proj) { return std::string("mlp.shared_expert.") + proj_name(proj, false); }

std::string expert_weight_name(const ModelConfig& c, int64_t layer, int64_t expert, ExpertProj proj) {
  const bool mx = c.moe.mixtral_names;
  return HfModel::layer_prefix(layer) + (mx ? "block_sparse_moe" : "mlp") + ".experts." + std::to_string(expert) + "." +
         proj_name(proj, mx && c.moe.mixtral_w_names) + ".weight";
}

std::string fused_experts_name(int64_t layer, ExpertProj proj) {
  return HfModel::layer_prefix(layer) + (proj == ExpertProj::Down ? "mlp.experts.down_proj" : "mlp.experts.gate_up_proj");
}

std::string fused_bias_name(int64_t layer, ExpertProj proj) { return fused_experts_name(layer, proj) + "_bias"; }

std::string router_module(const ModelConfig& c, bool fused) {
  if (c.moe.gpt_oss) return "mlp.router";
  return c.moe.mixtral_names && !fused ? "block_sparse_moe.gate" : "mlp.gate";
}

std::string router_weight_name(const ModelConfig& c, int64_t layer, bool fused) {
  return HfModel::layer_prefix(layer) + router_module(c, fused) + ".weight";
}

std::string shared_expert_name(int64_t layer, ExpertProj proj) {
  return HfModel::layer_prefix(layer) + shared_linear_name(proj) + ".weight";
}

std::string shared_gate_name(int64_t layer) { return HfModel::layer_prefix(layer) + "mlp.shared_expert_gate.weight"; }

}  // namespace ar
