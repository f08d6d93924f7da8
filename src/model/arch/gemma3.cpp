// Gemma 3 (Gemma3ForCausalLM; transformers' Gemma3TextConfig): grouped-query attention with q/k norm, a
// softmax scale of query_pre_attn_scalar^-1/2, sliding-window layers (every sliding_window_pattern-th layer,
// 6 by default, is global; or layer_types) with their own RoPE (rope_local_base_freq, 10000) and global
// layers with the model's (rope_theta 1e6, rope_scaling: linear x8 from 4B up); sandwich norms, every
// RMSNorm applied as 1 + w; the GeLU-tanh gated MLP; embeddings scaled by sqrt(hidden_size) and tied to
// the output; optional final logit soft-capping. Absent fields take Gemma3TextConfig's defaults.
#include <cmath>
#include <string>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
bool rope_entry_has_theta(const nlohmann::json& j, const char* type) {
  if (!j.contains("rope_parameters") || !j["rope_parameters"].is_object()) return false;
  const auto& rp = j["rope_parameters"];
  if (rp.contains("rope_theta")) return std::string(type) == "full_attention";  // one entry for every layer
  return rp.contains(type) && rp[type].is_object() && rp[type].contains("rope_theta");
}

// The sliding layers' RoPE: rope_parameters' sliding_attention entry, its theta from rope_local_base_freq
// when it names none (default 10000); the full layers' theta defaults to 1e6.
void configure_rope(ModelConfig& cfg, const nlohmann::json& j, const JsonIn& in) {
  if (!in.has("rope_theta") && !rope_entry_has_theta(j, "full_attention")) cfg.rope_theta = 1e6;
  ModelConfig::LayerRope local = cfg.sliding_rope.value_or(ModelConfig::LayerRope{0, {}});
  if (local.theta <= 0) {
    local.theta = in.has("rope_local_base_freq") ? in.at("rope_local_base_freq").num() : 10000.0;
    if (!(local.theta > 0) || !std::isfinite(local.theta)) in.at("rope_local_base_freq").bad("must be a positive number");
  }
  cfg.sliding_rope = local;
}

// layer_types, or every sliding_window_pattern-th layer global (transformers' default when it is absent).
void configure_layers(ModelConfig& cfg, const nlohmann::json& j, const std::string& path, const JsonIn& in) {
  if (in.has("layer_types")) return configure_sliding_layers(cfg, j, path, 4096, nullptr);
  const int64_t pattern = positive_or(in, "sliding_window_pattern", 6);
  nlohmann::json with_types = j;
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    with_types["layer_types"].push_back((l + 1) % pattern ? "sliding_attention" : "full_attention");
  configure_sliding_layers(cfg, with_types, path, 4096, nullptr);
}
}  // namespace

void configure_gemma3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  if (!in.has("head_dim")) cfg.head_dim = 256;
  if (!in.has("max_position_embeddings")) cfg.max_position_embeddings = 131072;
  if (!in.has("tie_word_embeddings")) cfg.tie_word_embeddings = true;
  if (!j.contains("bos_token_id")) cfg.bos_token_id = 2;
  if (!j.contains("eos_token_id")) cfg.eos_token_id = 1;
  for (const char* key : {"hidden_activation", "hidden_act"})
    if (in.has(key) && in.at(key).str() != "gelu_pytorch_tanh")
      in.at(key).bad("'" + in.at(key).str() + "' is not supported (Gemma 3 runs gelu_pytorch_tanh)");
  cfg.ffn_act = {GateKind::GeluTanh};
  cfg.qk_norm = true;
  cfg.qkv_bias = cfg.o_bias = in.boolean("attention_bias", false);
  cfg.norm_unit_offset = cfg.sandwich_norms = true;
  cfg.embed_scale = std::sqrt(double(cfg.hidden_size));
  const double scalar = in.has("query_pre_attn_scalar") ? in.at("query_pre_attn_scalar").num() : 256.0;
  if (!(scalar > 0) || !std::isfinite(scalar)) in.at("query_pre_attn_scalar").bad("must be a positive number");
  cfg.attn_scale = 1 / std::sqrt(scalar);
  if (in.has("final_logit_softcapping")) {
    cfg.final_logit_softcap = in.at("final_logit_softcapping").num();
    if (!(cfg.final_logit_softcap > 0) || !std::isfinite(cfg.final_logit_softcap))
      in.at("final_logit_softcapping").bad("must be a positive number or null");
  }
  if (in.has("attn_logit_softcapping"))
    fail(ErrorKind::Unsupported, path + ": field 'attn_logit_softcapping': soft-capped attention scores are not supported");
  if (in.boolean("use_bidirectional_attention", false))
    fail(ErrorKind::Unsupported, path + ": field 'use_bidirectional_attention': true is not supported (causal attention only)");
  configure_layers(cfg, j, path, in);
  configure_rope(cfg, j, in);
}

}  // namespace ar
