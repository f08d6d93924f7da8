// Gemma 3 (Gemma3ForCausalLM; transformers' Gemma3TextConfig): grouped-query attention with q/k norm, a
// softmax scale of query_pre_attn_scalar^-1/2, sliding-window layers (every sliding_window_pattern-th layer,
// 6 by default, is global; or layer_types) with their own RoPE (rope_local_base_freq, 10000) and global
// layers with the model's (rope_theta 1e6, rope_scaling: linear x8 from 4B up); sandwich norms, every
// RMSNorm applied as 1 + w; the GeLU-tanh gated MLP; embeddings scaled by sqrt(hidden_size) and tied to
// the output; optional final logit soft-capping. Absent fields take Gemma3TextConfig's defaults.
// Gemma3ForConditionalGeneration: the same language model, its fields in config.json's text_config, its
// tensors under a prefix beside the vision tower's (model/name_map.h).
// GGUF: llama.cpp's gemma3 (kGgufGemma3 below).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

// Gemma3TextConfig's defaults (transformers 5.25): the released multimodal configs give only the fields
// where a size differs (gemma-3-4b's text_config has no num_attention_heads, vocab_size or head_dim).
void gemma3_text_defaults(nlohmann::json& j) {
  const std::pair<const char*, nlohmann::json> defaults[] = {
      {"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216}, {"num_hidden_layers", 26},
      {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256}, {"max_position_embeddings", 131072},
      {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", true}, {"bos_token_id", 2}, {"eos_token_id", 1}};
  for (const auto& [key, value] : defaults)
    if (!j.contains(key)) j[key] = value;
}

void configure_gemma3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
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
  if (in.has("final_logit_softcapping") && cfg.multimodal)
    fail(ErrorKind::Unsupported, path + ": field 'final_logit_softcapping': transformers' Gemma3ForConditionalGeneration "
                                        "does not soft-cap the logits and vLLM does; which model is meant is ambiguous "
                                        "(no release sets it)");
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

namespace {
// llama.cpp's gemma3 graph (src/models/gemma3.cpp) scales queries by 1/sqrt(head_dim), by
// 1/sqrt(hidden / heads) for a 62-layer model (27B), and runs the sliding layers' RoPE unscaled.
void check_gemma3_gguf(const ModelConfig& cfg) {
  const double scalar = cfg.num_layers == 62 ? double(cfg.hidden_size / cfg.num_heads) : double(cfg.head_dim);
  if (std::abs(cfg.attn_scale * std::sqrt(scalar) - 1) > 1e-9)
    refuse_gguf(cfg, "gemma3", "has query_pre_attn_scalar other than " + std::to_string(int64_t(scalar)));
  if (cfg.qkv_bias || cfg.o_bias) refuse_gguf(cfg, "gemma3", "has attention_bias true");
  if (cfg.sliding_rope && cfg.sliding_rope->scaling.type != "default")
    refuse_gguf(cfg, "gemma3", "has scaled RoPE on its sliding layers");
  const bool slides = std::find(cfg.sliding_layers.begin(), cfg.sliding_layers.end(), 1) != cfg.sliding_layers.end();
  if (slides && cfg.sliding_window == 0) refuse_gguf(cfg, "gemma3", "has sliding layers without a window (sliding_window null)");
}

// The sliding layers as llama.cpp's default (every 6th layer global, written as nothing, as the
// converter does) or one flag per layer; no window key when no layer slides (every layer global).
void write_gemma3_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  if (std::find(cfg.sliding_layers.begin(), cfg.sliding_layers.end(), 1) != cfg.sliding_layers.end()) {
    set_gguf_count(keys, "attention.sliding_window", cfg.sliding_window);
    write_sliding_pattern(cfg, keys, 6);
    set_gguf_key(keys, "rope.freq_base_swa", float(cfg.sliding_rope ? cfg.sliding_rope->theta : cfg.rope_theta));
  }
  if (cfg.final_logit_softcap > 0) set_gguf_key(keys, "final_logit_softcapping", float(cfg.final_logit_softcap));
  if (cfg.rope_scaling.type == "linear") {
    set_gguf_key(keys, "rope.scaling.type", std::string("linear"));
    set_gguf_key(keys, "rope.scaling.factor", float(cfg.rope_scaling.factor));
  }
}

// Read back as llama.cpp runs the file: query_pre_attn_scalar by its rule, the layers' pattern.
void read_gemma3_keys(const GgufKeyReader& k, nlohmann::json& j) {
  read_gqa_head_keys(k, j);
  const int64_t layers = j["num_hidden_layers"].get<int64_t>(), head_dim = j.value("head_dim", int64_t(0));
  j["head_dim"] = head_dim ? head_dim : j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>();
  j["query_pre_attn_scalar"] = layers == 62 ? j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>()
                                            : j["head_dim"].get<int64_t>();
  if (auto window = k.count("attention.sliding_window")) {
    j["sliding_window"] = *window;
    j["layer_types"] = read_layer_types(k, layers, 6);
  } else {  // no window: every layer global (llama.cpp's swa_type none)
    j["layer_types"] = std::vector<std::string>(size_t(layers), "full_attention");
  }
  j["rope_local_base_freq"] = k.number("rope.freq_base_swa").value_or(10000.0);
  if (auto cap = k.number("final_logit_softcapping"); cap && *cap > 0) j["final_logit_softcapping"] = *cap;
  const std::string type = k.text("rope.scaling.type").value_or("none");
  if (type == "linear") j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", k.number("rope.scaling.factor").value_or(1)}};
  else if (type != "none") k.unsupported("rope.scaling.type", "= '" + type + "' is not read (none, linear)");
}

// Gemma's sandwich norms by llama.cpp's names.
constexpr GgufRename kGemma3Renames[] = {{"post_attention_layernorm.weight", "post_attention_norm.weight"},
                                         {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
                                         {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
}  // namespace

const GgufArch kGgufGemma3{.name = "gemma3",
                           .linear_rope = true,
                           .renames = kGemma3Renames,
                           .check = check_gemma3_gguf,
                           .write_keys = write_gemma3_keys,
                           .read_keys = read_gemma3_keys};

}  // namespace ar
