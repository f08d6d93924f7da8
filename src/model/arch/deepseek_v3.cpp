// DeepSeek-V3 / R1 / V3.1 and Kimi K2 (DeepseekV3ForCausalLM): multi-head latent attention
// (model/attention_mla.h: q_lora_rank, kv_lora_rank, qk_nope/rope_head_dim, v_head_dim, rope_interleave;
// YaRN RoPE over the rope dims with mscale_all_dim folded into the softmax scale), the first
// first_k_dense_replace layers dense, the others a MoE of n_routed_experts behind the sigmoid router
// with e_score_correction_bias, n_group / topk_group and routed_scaling_factor (model/moe_router.h), plus
// n_shared_experts ungated shared experts (mlp.shared_experts.*, moe_intermediate_size each). Absent
// fields take transformers' DeepseekV3Config defaults. The multi-token-prediction layers
// (num_nextn_predict_layers, stored past num_hidden_layers) are copied unchanged into every output.
#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
int64_t positive_or(const JsonIn& in, const char* key, int64_t def) {
  if (!in.has(key)) return def;
  const int64_t v = in.at(key).i64();
  if (v <= 0) in.at(key).bad("must be a positive integer");
  return v;
}

// A field present as null (JsonIn::has says no): transformers' None, which differs from an absent field's default.
bool null_field(const nlohmann::json& j, const char* key) { return j.contains(key) && j[key].is_null(); }

void configure_mla(ModelConfig& cfg, const nlohmann::json& j, const JsonIn& in) {
  MlaConfig& m = cfg.mla;
  m.q_lora_rank = null_field(j, "q_lora_rank") ? 0 : positive_or(in, "q_lora_rank", 1536);
  m.kv_lora_rank = positive_or(in, "kv_lora_rank", 512);
  m.qk_nope_head_dim = positive_or(in, "qk_nope_head_dim", 128);
  m.qk_rope_head_dim = positive_or(in, "qk_rope_head_dim", 64);
  m.v_head_dim = positive_or(in, "v_head_dim", 128);
  m.rope_interleave = in.boolean("rope_interleave", true);
  for (const auto& [key, v] : {std::pair{"q_lora_rank", m.q_lora_rank}, {"kv_lora_rank", m.kv_lora_rank},
                               {"qk_nope_head_dim", m.qk_nope_head_dim}, {"qk_rope_head_dim", m.qk_rope_head_dim},
                               {"v_head_dim", m.v_head_dim}})
    if (v > (int64_t(1) << 16)) in.at(key).bad("exceeds the limit of 65536");
  if (m.qk_rope_head_dim % 2) in.at("qk_rope_head_dim").bad("must be even for rotary embeddings");
  if (m.v_head_dim > m.qk_nope_head_dim + m.qk_rope_head_dim)
    in.at("v_head_dim").bad("exceeds qk_nope_head_dim + qk_rope_head_dim (not supported)");
  if (in.boolean("attention_bias", false)) in.at("attention_bias").bad("true is not supported for latent attention");
  if (cfg.num_kv_heads != cfg.num_heads)
    in.at("num_key_value_heads").bad("must equal num_attention_heads for latent attention");
  cfg.head_dim = m.qk_rope_head_dim;  // transformers' head_dim here: the rotated dims
}

void configure_routing(ModelConfig& cfg, const nlohmann::json& j, const JsonIn& in, const std::string& path) {
  configure_moe(cfg, j, path, {"n_routed_experts", "num_local_experts", "moe_intermediate_size", nullptr, false});
  MoeConfig& m = cfg.moe;
  m.routing = Routing::SigmoidGroups;
  m.norm_topk_prob = in.boolean("norm_topk_prob", true);
  m.n_group = positive_or(in, "n_group", 8);
  m.topk_group = positive_or(in, "topk_group", 4);
  if (m.num_experts % m.n_group) in.at("n_group").bad("does not divide n_routed_experts " + std::to_string(m.num_experts));
  if (m.topk_group > m.n_group) in.at("topk_group").bad("exceeds n_group " + std::to_string(m.n_group));
  if (m.top_k > m.topk_group * (m.num_experts / m.n_group))
    in.at("num_experts_per_tok").bad("exceeds the experts of topk_group groups");
  m.routed_scaling_factor = in.has("routed_scaling_factor") ? in.at("routed_scaling_factor").num() : 2.5;
  if (!(m.routed_scaling_factor > 0) || m.routed_scaling_factor > 1e6)
    in.at("routed_scaling_factor").bad("must be a positive number");
  const int64_t shared = null_field(j, "n_shared_experts") ? 0 : positive_or(in, "n_shared_experts", 1);
  m.shared_intermediate = shared * m.expert_intermediate;
  m.shared_module = "shared_experts";
  m.shared_gate = false;
  m.first_dense = in.has("first_k_dense_replace") ? in.at("first_k_dense_replace").i64() : 3;
  if (m.first_dense < 0 || m.first_dense > cfg.num_layers)
    in.at("first_k_dense_replace").bad("must be within 0.." + std::to_string(cfg.num_layers));
  if (in.has("moe_layer_freq") && in.at("moe_layer_freq").i64() != 1) in.at("moe_layer_freq").bad("only 1 is supported");
  if (in.has("scoring_func") && in.at("scoring_func").str() != "sigmoid")
    in.at("scoring_func").bad("only 'sigmoid' (DeepSeek-V3's router) is supported");
  if (in.has("topk_method") && in.at("topk_method").str() != "noaux_tc")
    in.at("topk_method").bad("only 'noaux_tc' (DeepSeek-V3's router) is supported");
}
}  // namespace

void configure_deepseek_v3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  configure_mla(cfg, j, in);
  configure_routing(cfg, j, in, path);
  const int64_t mtp = in.has("num_nextn_predict_layers") ? in.at("num_nextn_predict_layers").i64() : 0;
  if (mtp < 0 || mtp > 16) in.at("num_nextn_predict_layers").bad("must be within 0..16");
  cfg.mtp_layers = mtp;
}

}  // namespace ar
