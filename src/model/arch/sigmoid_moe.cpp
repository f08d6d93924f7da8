// The config.json fields of the MoE families behind DeepSeek-V3's router (DeepSeek-V3, Kimi K2, GLM-4.5):
// n_routed_experts, num_experts_per_tok, moe_intermediate_size, the sigmoid router's n_group / topk_group /
// routed_scaling_factor / norm_topk_prob, n_shared_experts ungated shared experts (mlp.shared_experts.*),
// the first first_k_dense_replace layers dense, and the multi-token-prediction layers stored past
// num_hidden_layers (num_nextn_predict_layers, transformers' num_mtp_layers). Absent fields take the
// family's transformers defaults; each bad field is refused naming it.
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
void check_groups(const MoeConfig& m, const JsonIn& in) {
  if (m.num_experts % m.n_group) in.at("n_group").bad(std::string("does not divide n_routed_experts ") + std::to_string(m.num_experts));
  if (m.topk_group > m.n_group) in.at("topk_group").bad(std::string("exceeds n_group ") + std::to_string(m.n_group));
  if (m.top_k > m.topk_group * (m.num_experts / m.n_group))
    in.at("num_experts_per_tok").bad("exceeds the experts of topk_group groups");
}
}  // namespace

void configure_sigmoid_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path, const SigmoidMoeDefaults& d) {
  configure_moe(cfg, j, path, {"n_routed_experts", "num_local_experts", "moe_intermediate_size", nullptr, false});
  const JsonIn in(j, path);
  MoeConfig& m = cfg.moe;
  m.routing = Routing::SigmoidGroups;
  m.norm_topk_prob = in.boolean("norm_topk_prob", true);
  m.n_group = positive_or(in, "n_group", d.n_group);
  m.topk_group = positive_or(in, "topk_group", d.topk_group);
  check_groups(m, in);
  m.routed_scaling_factor = in.has("routed_scaling_factor") ? in.at("routed_scaling_factor").num() : d.scaling;
  if (!(m.routed_scaling_factor > 0) || m.routed_scaling_factor > 1e6)
    in.at("routed_scaling_factor").bad("must be a positive number");
  const int64_t shared = null_field(j, "n_shared_experts") ? 0 : positive_or(in, "n_shared_experts", d.shared);
  m.shared_intermediate = shared * m.expert_intermediate;
  m.shared_module = "shared_experts";
  m.shared_gate = false;
  m.first_dense = in.has("first_k_dense_replace") ? in.at("first_k_dense_replace").i64() : d.first_dense;
  if (m.first_dense < 0 || m.first_dense > cfg.num_layers)
    in.at("first_k_dense_replace").bad(std::string("must be within 0..") + std::to_string(cfg.num_layers));
  if (in.has("moe_layer_freq") && in.at("moe_layer_freq").i64() != 1) in.at("moe_layer_freq").bad("only 1 is supported");
  if (in.has("scoring_func") && in.at("scoring_func").str() != "sigmoid")
    in.at("scoring_func").bad("only 'sigmoid' (DeepSeek-V3's router) is supported");
  if (in.has("topk_method") && in.at("topk_method").str() != "noaux_tc")
    in.at("topk_method").bad("only 'noaux_tc' (DeepSeek-V3's router) is supported");
  const char* mtp_key = in.has("num_nextn_predict_layers") ? "num_nextn_predict_layers" : "num_mtp_layers";
  cfg.mtp_layers = in.has(mtp_key) ? in.at(mtp_key).i64() : 0;
  if (cfg.mtp_layers < 0 || cfg.mtp_layers > 16) in.at(mtp_key).bad("must be within 0..16");
}

}  // namespace ar
