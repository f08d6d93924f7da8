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

namespace {
// llama.cpp's deepseek2 runs MLA as multi-query attention over the latent: one KV head of kv_lora + rope,
// values of kv_lora, the per-head sizes in key_length_mla / value_length_mla, RoPE on adjacent pairs
// (rope_interleave) of the rope dims; YaRN from the scaling keys, mscale_all_dim as yarn_log_multiplier / 0.1.
void check_deepseek2(const ModelConfig& cfg) {
  const RopeScaling& r = cfg.rope_scaling;
  if (!cfg.mla.rope_interleave) refuse_gguf(cfg, "deepseek2", "has rope_interleave false (rotate_half pairs)");
  if (r.type == "yarn" && (r.mscale != r.mscale_all_dim || r.attention_factor != 0))
    refuse_gguf(cfg, "deepseek2", "has YaRN with mscale != mscale_all_dim or an attention_factor");
}

void write_deepseek2_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  const MlaConfig& m = cfg.mla;
  set_gguf_count(keys, "attention.head_count_kv", 1);
  set_gguf_count(keys, "attention.key_length", m.kv_lora_rank + m.qk_rope_head_dim);
  set_gguf_count(keys, "attention.value_length", m.kv_lora_rank);
  set_gguf_count(keys, "attention.key_length_mla", m.qk_nope_head_dim + m.qk_rope_head_dim);
  set_gguf_count(keys, "attention.value_length_mla", m.v_head_dim);
  set_gguf_count(keys, "rope.dimension_count", m.qk_rope_head_dim);
  // Written as 0 too: llama.cpp requires the key unless the layer count is a "lite" model's, and takes
  // attn_q for attn_q_a / attn_q_b when it is 0.
  set_gguf_count(keys, "attention.q_lora_rank", m.q_lora_rank);
  set_gguf_count(keys, "attention.kv_lora_rank", m.kv_lora_rank);
  write_sigmoid_moe_keys(cfg, keys);
  const RopeScaling& r = cfg.rope_scaling;
  if (r.type != "yarn") return;
  set_gguf_key(keys, "rope.scaling.type", std::string("yarn"));
  set_gguf_key(keys, "rope.scaling.factor", float(r.factor));
  set_gguf_count(keys, "rope.scaling.original_context_length", r.original_max_position_embeddings);
  set_gguf_key(keys, "rope.scaling.yarn_beta_fast", float(r.beta_fast));  // as the converter; deepseek2 reads
  set_gguf_key(keys, "rope.scaling.yarn_beta_slow", float(r.beta_slow));  // neither (it runs 32 / 1)
  set_gguf_key(keys, "rope.scaling.yarn_log_multiplier", float(0.1 * r.mscale_all_dim));
}

void read_deepseek2_yarn(const GgufKeyReader& k, nlohmann::json& j) {
  const std::string type = k.text("rope.scaling.type").value_or("none");
  if (type == "none") return;
  if (type != "yarn") k.unsupported("rope.scaling.type", "= '" + type + "' is not read (none, yarn)");
  const double mscale = k.number("rope.scaling.yarn_log_multiplier").value_or(0) / 0.1;
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", k.number("rope.scaling.factor").value_or(1)},
                       {"original_max_position_embeddings", k.required_count("rope.scaling.original_context_length")},
                       {"beta_fast", k.number("rope.scaling.yarn_beta_fast").value_or(32)},
                       {"beta_slow", k.number("rope.scaling.yarn_beta_slow").value_or(1)},
                       {"mscale", mscale},
                       {"mscale_all_dim", mscale}};
}

void read_deepseek2_keys(const GgufKeyReader& k, nlohmann::json& j) {
  const int64_t kr = k.required_count("attention.kv_lora_rank"), rope = k.required_count("rope.dimension_count");
  const std::optional<int64_t> qk = k.count("attention.key_length_mla"), v = k.count("attention.value_length_mla");
  if (!qk || !v) k.unsupported("attention.key_length_mla", "or value_length_mla is missing (the legacy unsplit attn_kv_b layout is not read)");
  if (*qk <= rope) k.bad("attention.key_length_mla", "must exceed rope.dimension_count");
  for (auto [key, want] : {std::pair{"attention.key_length", kr + rope}, {"attention.value_length", kr}})
    if (k.count(key).value_or(want) != want) k.bad(key, "must be kv_lora_rank (+ rope.dimension_count for the key)");
  j["num_key_value_heads"] = j["num_attention_heads"];  // the file's 1 is the latent's single KV head
  const int64_t q_lora = k.natural("attention.q_lora_rank").value_or(0);
  j["q_lora_rank"] = q_lora ? nlohmann::json(q_lora) : nlohmann::json(nullptr);
  j["kv_lora_rank"] = kr;
  j["qk_rope_head_dim"] = rope;
  j["qk_nope_head_dim"] = *qk - rope;
  j["v_head_dim"] = *v;
  j["rope_interleave"] = true;
  read_deepseek2_yarn(k, j);
  read_sigmoid_moe_keys(k, j, false);
}
}  // namespace

const GgufArch kGgufDeepseekV3{.name = "deepseek2",
                               .read_as = GgufReadAs::Moe,
                               .leading_dense = true,
                               .yarn = true,
                               .check = check_deepseek2,
                               .write_keys = write_deepseek2_keys,
                               .read_keys = read_deepseek2_keys};

}  // namespace ar
