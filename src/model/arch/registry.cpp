#include "model/arch/arch.h"

namespace ar {

namespace {
constexpr ArchSpec kArchs[] = {
    {"LlamaForCausalLM", configure_llama},
    {"MistralForCausalLM", configure_mistral},
    {"Qwen2ForCausalLM", configure_qwen2},
    {"Qwen3ForCausalLM", configure_qwen3},
    {"Qwen2MoeForCausalLM", configure_qwen2_moe},
    {"Qwen3MoeForCausalLM", configure_qwen3_moe},
    {"MixtralForCausalLM", configure_mixtral},
    {"DeepseekV3ForCausalLM", configure_deepseek_v3},
    {"DeepseekV32ForCausalLM", configure_deepseek_v32},
    {"Glm4MoeForCausalLM", configure_glm4_moe},
};
}  // namespace

const ArchSpec* find_arch(const std::string& name) {
  for (const auto& a : kArchs)
    if (name == a.name) return &a;
  return nullptr;
}

std::string supported_archs() {
  std::string s;
  for (const auto& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

}  // namespace ar
