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

void configure_deepseek_v3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  configure_mla(cfg, j, in);
  configure_sigmoid_moe(cfg, j, path, {8, 4, 3, 1, 2.5});
}

}  // namespace ar
