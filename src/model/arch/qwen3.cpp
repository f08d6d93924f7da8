// Qwen3: RMSNorm over head_dim on q and k before RoPE (q_norm, k_norm); explicit head_dim;
// attention_bias (default false) on q/k/v/o.
#include "core/error.h"
#include "model/arch/arch.h"
#include "io/json_file.h"

namespace ar {
void configure_qwen3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  cfg.qk_norm = true;
  bool bias = JsonIn(j, path).boolean("attention_bias", false);
  cfg.qkv_bias = cfg.o_bias = bias;
  if (JsonIn(j, path).boolean("use_sliding_window", false))
    fail(ErrorKind::Unsupported, path + ": field 'use_sliding_window': true is not supported");
}

const GgufArch kGgufQwen3{.name = "qwen3"};
}  // namespace ar
