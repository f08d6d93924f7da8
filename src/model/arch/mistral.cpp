// Mistral: Llama block; sliding_window (null or N) limits attention span — sequences up to N tokens
// are exact with full causal attention, longer ones are refused (ModelConfig::dense_limit).
#include "model/arch/arch.h"

namespace ar {
void configure_mistral(ModelConfig& cfg, const nlohmann::json& j, const std::string&) {
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
    cfg.dense_limit = j["sliding_window"].get<int64_t>();
    cfg.dense_limit_field = "sliding_window";
  }
}

// Written as llama (convert_hf_to_gguf's LlamaModel); a llama file reads back as Llama.
const GgufArch kGgufMistral{.name = "llama", .read_as = GgufReadAs::Never, .permute_qk = true};
}  // namespace ar
