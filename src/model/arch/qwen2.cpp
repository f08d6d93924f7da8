// Qwen2 / Qwen2.5: bias on q/k/v (not o); use_sliding_window must be off.
#include "core/error.h"
#include "model/arch/arch.h"
#include "io/json_file.h"

namespace ar {
void configure_qwen2(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  cfg.qkv_bias = true;
  if (JsonIn(j, path).boolean("use_sliding_window", false))
    fail(ErrorKind::Unsupported, path + ": field 'use_sliding_window': true is not supported");
}

const GgufArch kGgufQwen2{.name = "qwen2"};  // NEOX RoPE in llama.cpp: rows as HF has them
}  // namespace ar
