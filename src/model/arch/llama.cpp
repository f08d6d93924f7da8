// Llama (1/2/3/3.x, TinyLlama, SmolLM): optional attention_bias on q/k/v/o; llama3 rope scaling.
#include "core/error.h"
#include "model/arch/arch.h"
#include "io/json_file.h"

namespace ar {
void configure_llama(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  bool bias = JsonIn(j, path).boolean("attention_bias", false);
  cfg.qkv_bias = cfg.o_bias = bias;
}

// llama.cpp runs Llama with adjacent-pair RoPE: convert_hf_to_gguf interleaves the Q/K rows.
const GgufArch kGgufLlama{.name = "llama", .read_as = GgufReadAs::Dense, .permute_qk = true};
}  // namespace ar
