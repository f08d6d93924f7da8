#include "model/arch/arch.h"

#include <algorithm>
#include <vector>

namespace ar {

namespace {
constexpr ArchSpec kArchs[] = {
    {"LlamaForCausalLM", configure_llama, &kGgufLlama},
    {"MistralForCausalLM", configure_mistral, &kGgufMistral},
    {"Qwen2ForCausalLM", configure_qwen2, &kGgufQwen2},
    {"Qwen3ForCausalLM", configure_qwen3, &kGgufQwen3},
    {"Qwen2MoeForCausalLM", configure_qwen2_moe, &kGgufQwen2Moe},
    {"Qwen3MoeForCausalLM", configure_qwen3_moe, &kGgufQwen3Moe},
    {"MixtralForCausalLM", configure_mixtral, &kGgufMixtral},
    {"DeepseekV3ForCausalLM", configure_deepseek_v3, &kGgufDeepseekV3},
    {"DeepseekV32ForCausalLM", configure_deepseek_v32, nullptr},
    {"Glm4MoeForCausalLM", configure_glm4_moe, &kGgufGlm4Moe},
    {"GptOssForCausalLM", configure_gpt_oss, &kGgufGptOss},
    {"Gemma3ForCausalLM", configure_gemma3, &kGgufGemma3, gemma3_text_defaults},
    {"Qwen3NextForCausalLM", configure_qwen3_next, &kGgufQwen3Next},
    {"Qwen3_5ForCausalLM", configure_qwen3_5, &kGgufQwen35, qwen3_5_text_defaults},
    {"Qwen3_5MoeForCausalLM", configure_qwen3_5_moe, &kGgufQwen35Moe, qwen3_5_moe_text_defaults},
    {"Qwen3_5ForConditionalGeneration", configure_qwen3_5, &kGgufQwen35, qwen3_5_text_defaults, /*multimodal=*/true},
    {"Qwen3_5MoeForConditionalGeneration", configure_qwen3_5_moe, &kGgufQwen35Moe, qwen3_5_moe_text_defaults,
     /*multimodal=*/true},
    {"Gemma3ForConditionalGeneration", configure_gemma3, &kGgufGemma3, gemma3_text_defaults, /*multimodal=*/true},
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

const ArchSpec* find_arch_for_gguf(const std::string& gguf, bool moe) {
  for (const auto& a : kArchs)
    if (a.gguf && gguf == a.gguf->name && a.gguf->read_as == (moe ? GgufReadAs::Moe : GgufReadAs::Dense)) return &a;
  return nullptr;
}

std::string gguf_written_archs() {
  std::string s;
  for (const auto& a : kArchs)
    if (a.gguf) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

std::string gguf_read_archs() {
  std::vector<std::string> seen;
  std::string s;
  for (const auto& a : kArchs)
    if (a.gguf && a.gguf->read_as != GgufReadAs::Never && std::find(seen.begin(), seen.end(), a.gguf->name) == seen.end()) {
      seen.push_back(a.gguf->name);
      s += (s.empty() ? "" : ", ") + seen.back();
    }
  return s;
}

}  // namespace ar
