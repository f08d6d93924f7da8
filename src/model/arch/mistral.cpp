// Mistral: Llama block; sliding_window (null or N) limits attention span — sequences up to N tokens
// are exact with full causal attention, longer ones are refused.
#include "model/arch/arch.h"

namespace ar {
void configure_mistral(ModelConfig& cfg, const nlohmann::json& j, const std::string&) {
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer())
    cfg.sliding_window = j["sliding_window"].get<int64_t>();
}
}  // namespace ar
