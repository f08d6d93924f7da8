// gpt-oss (GptOssForCausalLM, 20B and 120B): grouped-query attention with q/k/v/o biases, a learned sink
// logit per head (self_attn.sinks), a 128-key sliding window on the layers layer_types names (every other
// layer from layer 0 by default) and YaRN RoPE; every layer a MoE of num_local_experts experts of
// intermediate_size, routed by a biased router (mlp.router: top-k of the logits, softmax over the
// selected), each expert with biased gate/up/down Linears and the clamped SwiGLU
// (gate = min(gate, limit), up = clamp(up, -limit, limit), (up + 1) gate sigmoid(alpha gate)).
// The experts' checkpoint layouts: model/moe_names.h; the release's MXFP4 experts: model/mxfp4_experts.cpp.
// No GGUF output yet (llama.cpp's gpt-oss).
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

}  // namespace ar
