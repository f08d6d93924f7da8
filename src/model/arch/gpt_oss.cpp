// gpt-oss (GptOssForCausalLM, 20B and 120B): grouped-query attention with q/k/v/o biases, a learned sink
// logit per head (self_attn.sinks), a 128-key sliding window on the layers layer_types names (every other
// layer from layer 0 by default) and YaRN RoPE; every layer a MoE of num_local_experts experts of
// intermediate_size, routed by a biased router (mlp.router: top-k of the logits, softmax over the
// selected), each expert with biased gate/up/down Linears and the clamped SwiGLU
// (gate = min(gate, limit), up = clamp(up, -limit, limit), (up + 1) gate sigmoid(alpha gate)).
// The experts' checkpoint layouts: model/moe_names.h; the release's MXFP4 experts: model/mxfp4_experts.cpp.
// GGUF: llama.cpp's gpt-oss (kGgufGptOss below).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
float swiglu_param(const JsonIn& in, const char* key, double def) {
  if (!in.has(key)) return float(def);
  const double v = in.at(key).num();
  if (!(v > 0) || !std::isfinite(float(v))) in.at(key).bad("must be a positive finite number");
  return float(v);
}

// GptOssConfig's RoPE when config.json names none: YaRN x32 over 4096 positions, theta 150000.
void default_rope(ModelConfig& cfg, const nlohmann::json& j) {
  const bool named = (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) ||
                     (j.contains("rope_scaling") && !j["rope_scaling"].is_null());
  if (!j.contains("rope_theta") || j["rope_theta"].is_null()) cfg.rope_theta = 150000;
  if (named) return;
  RopeScaling& r = cfg.rope_scaling;
  r.type = "yarn";
  r.factor = 32;
  r.beta_fast = 32;
  r.beta_slow = 1;
  r.truncate = false;
  r.original_max_position_embeddings = 4096;
}
}  // namespace

void configure_gpt_oss(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  configure_moe(cfg, j, path, {"num_local_experts", "num_experts", "intermediate_size", nullptr, true});
  cfg.moe.routing = Routing::TopKSoftmax;
  cfg.moe.gpt_oss = true;
  cfg.qkv_bias = cfg.o_bias = in.boolean("attention_bias", true);
  cfg.attn_sinks = true;
  cfg.ffn_act = {GateKind::ClampedSwiglu, swiglu_param(in, "swiglu_alpha", 1.702), swiglu_param(in, "swiglu_limit", 7.0)};
  configure_sliding_layers(cfg, j, path, 128, [](int64_t l) { return l % 2 == 0; });
  if (!j.contains("rope_parameters") || !j["rope_parameters"].is_object() || !j["rope_parameters"].contains("rope_theta"))
    default_rope(cfg, j);
}

namespace {
// llama.cpp's gpt-oss graph (src/models/openai-moe.cpp) fixes what config.json may vary: the activation's
// alpha and limit, the o_proj bias, YaRN's ramp (beta 32 / 1) and attention factor.
void check_gpt_oss_gguf(const ModelConfig& cfg) {
  if (cfg.ffn_act.alpha != 1.702f || cfg.ffn_act.limit != 7.0f)
    refuse_gguf(cfg, "gpt-oss", "has swiglu_alpha / swiglu_limit other than 1.702 / 7");
  if (!cfg.o_bias || !cfg.qkv_bias) refuse_gguf(cfg, "gpt-oss", "has attention_bias false");
  const bool slides = std::find(cfg.sliding_layers.begin(), cfg.sliding_layers.end(), 1) != cfg.sliding_layers.end();
  if (slides && cfg.sliding_window == 0) refuse_gguf(cfg, "gpt-oss", "has sliding layers without a window (sliding_window null)");
  const RopeScaling& r = cfg.rope_scaling;
  if (r.type == "yarn" && (r.beta_fast != 32 || r.beta_slow != 1 || r.mscale != 0 || r.mscale_all_dim != 0 || r.attention_factor != 0))
    refuse_gguf(cfg, "gpt-oss", "has YaRN with beta_fast / beta_slow other than 32 / 1, mscale or an attention_factor");
}

// The period-2 pattern (even layers sliding) is llama.cpp's default and written as nothing, as the
// converter does; any other as one flag per layer.
void write_gpt_oss_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  set_gguf_count(keys, "expert_feed_forward_length", cfg.moe.expert_intermediate);
  set_gguf_count(keys, "attention.sliding_window", cfg.sliding_window);
  write_sliding_pattern(cfg, keys, 2);
  const RopeScaling& r = cfg.rope_scaling;
  if (r.type != "yarn") return;
  set_gguf_key(keys, "rope.scaling.type", std::string("yarn"));
  set_gguf_key(keys, "rope.scaling.factor", float(r.factor));
  set_gguf_count(keys, "rope.scaling.original_context_length", r.original_max_position_embeddings);
}

// Read back as llama.cpp runs the file: its YaRN rounds the correction range outwards (truncate true;
// transformers' gpt-oss does not), its sliding_window_pattern a period (default 2: even layers sliding)
// or a flag per layer.
void read_gpt_oss_keys(const GgufKeyReader& k, nlohmann::json& j) {
  read_gqa_head_keys(k, j);
  const int64_t layers = j["num_hidden_layers"].get<int64_t>();
  j["num_local_experts"] = k.required_count("expert_count");
  j["num_experts_per_tok"] = k.required_count("expert_used_count");
  j["intermediate_size"] = k.required_count("expert_feed_forward_length");
  j["sliding_window"] = k.required_count("attention.sliding_window");
  j["layer_types"] = read_layer_types(k, layers, 2);
  const std::string type = k.text("rope.scaling.type").value_or("none");
  if (type == "none") {
    j["rope_scaling"] = {{"rope_type", "default"}};
    return;
  }
  if (type != "yarn") k.unsupported("rope.scaling.type", "= '" + type + "' is not read (none, yarn)");
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", k.number("rope.scaling.factor").value_or(1)},
                       {"original_max_position_embeddings", k.required_count("rope.scaling.original_context_length")},
                       {"beta_fast", 32},
                       {"beta_slow", 1},
                       {"truncate", true}};
}

// The router and sinks by llama.cpp's names; post_attention_layernorm is its attn_post_norm
// (blk.N.post_attention_norm), the norm before the experts.
constexpr GgufRename kGptOssRenames[] = {{"post_attention_layernorm.weight", "post_attention_norm.weight"},
                                         {"self_attn.sinks", "attn_sinks.weight"},
                                         {"mlp.router.weight", "ffn_gate_inp.weight"},
                                         {"mlp.router.bias", "ffn_gate_inp.bias"}};
}  // namespace

// llama.cpp's gpt-oss: softmax over the selected logits (a fixed renormalization), every layer MoE.
const GgufArch kGgufGptOss{.name = "gpt-oss",
                           .read_as = GgufReadAs::Moe,
                           .topk_norm = GgufTopkNorm::Always,
                           .yarn = true,
                           .renames = kGptOssRenames,
                           .check = check_gpt_oss_gguf,
                           .write_keys = write_gpt_oss_keys,
                           .read_keys = read_gpt_oss_keys};

}  // namespace ar
