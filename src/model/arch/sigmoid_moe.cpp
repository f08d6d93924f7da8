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


// llama.cpp's keys (its build_moe_ffn): sigmoid gating (expert_gating_func 2), the score-correction bias
// as exp_probs_b, group-limited choice, renormalization and scaling of the chosen weights.
void write_sigmoid_moe_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  const MoeConfig& m = cfg.moe;
  set_gguf_count(keys, "leading_dense_block_count", m.first_dense);
  set_gguf_count(keys, "expert_feed_forward_length", m.expert_intermediate);
  set_gguf_count(keys, "expert_shared_count", m.shared_intermediate / m.expert_intermediate);
  set_gguf_key(keys, "expert_weights_scale", float(m.routed_scaling_factor));
  set_gguf_key(keys, "expert_weights_norm", m.norm_topk_prob);
  set_gguf_count(keys, "expert_gating_func", 2);
  if (m.n_group > 1 && m.topk_group < m.n_group) {  // llama.cpp asserts 0 < used < groups; all groups: none
    set_gguf_count(keys, "expert_group_count", m.n_group);
    set_gguf_count(keys, "expert_group_used_count", m.topk_group);
  }
}

void read_sigmoid_moe_keys(const GgufKeyReader& k, nlohmann::json& j, bool sigmoid_by_default) {
  if (k.natural("nextn_predict_layers").value_or(0) > 0)
    k.unsupported("nextn_predict_layers", "> 0: MTP layers are not read (a file without them is)");
  const std::optional<int64_t> gating = k.natural("expert_gating_func");
  if (gating ? *gating != 2 : !sigmoid_by_default)
    k.unsupported("expert_gating_func", (gating ? "= " + std::to_string(*gating) : std::string("is missing (softmax)")) +
                                            ": only sigmoid gating (2) is read");
  j["n_routed_experts"] = k.required_count("expert_count");
  j["num_experts_per_tok"] = k.required_count("expert_used_count");
  j["moe_intermediate_size"] = k.required_count("expert_feed_forward_length");
  const int64_t shared = k.natural("expert_shared_count").value_or(0);
  j["n_shared_experts"] = shared ? nlohmann::json(shared) : nlohmann::json(nullptr);
  j["first_k_dense_replace"] = k.natural("leading_dense_block_count").value_or(0);
  const double scale = k.number("expert_weights_scale").value_or(0);
  j["routed_scaling_factor"] = scale == 0 ? 1.0 : scale;  // llama.cpp: 0 = no scaling
  j["norm_topk_prob"] = k.flag("expert_weights_norm").value_or(false);
  j["n_group"] = k.count("expert_group_count").value_or(1);
  j["topk_group"] = k.count("expert_group_used_count").value_or(1);
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
}

}  // namespace ar
