// A multimodal checkpoint made from a text-only one, for the pipeline and multi-process tests: the
// synthetic Gemma 3 inside Gemma3ForConditionalGeneration, or the synthetic Qwen3.5-MoE inside
// Qwen3_5MoeForConditionalGeneration, with made-up vision tensors beside it.
#pragma once
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/context.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace ar::test {

inline constexpr const char* kVisionTensors[] = {"vision_tower.encoder.layers.0.self_attn.q_proj.weight",
                                                 "vision_tower.post_layernorm.weight",
                                                 "multi_modal_projector.mm_input_projection_weight"};

// `text`'s files and tensors as a multimodal checkpoint at `mm` with config.json `cfg`: every model.* tensor
// under `prefix`, lm_head.* under language_model.lm_head. when the prefix is language_model.model. (else
// as stored), random [16, 32] bf16 tensors named `vision` beside them, a processor file.
inline void write_multimodal_as(const std::string& text, const std::string& mm, const nlohmann::json& cfg,
                                const std::string& prefix, const std::vector<std::string>& vision) {
  std::filesystem::create_directories(mm);
  for (const auto& e : std::filesystem::directory_iterator(text))
    if (e.path().extension() != ".safetensors" && e.path().filename() != "config.json")
      std::filesystem::copy_file(e.path(), mm + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  write_file_atomic(mm + "/config.json", cfg.dump(2));
  write_file_atomic(mm + "/preprocessor_config.json", "{\"image_processor_type\": \"ImageProcessor\"}\n");
  Context ctx;
  auto f = SafetensorsFile::open(text + "/model.safetensors");
  std::vector<StEntry> out;
  const bool legacy = prefix == "language_model.model.";
  for (const auto& s : f->header().tensors) {
    const bool head = s.name.rfind("lm_head.", 0) == 0;
    const std::string name = head ? (legacy ? "language_model." + s.name : s.name) : prefix + s.name.substr(6);
    StEntry e{name, Tensor::empty(s.shape, s.dtype, ctx)};
    std::memcpy(e.tensor.raw(), f->bytes(s), e.tensor.nbytes());
    out.push_back(std::move(e));
  }
  uint32_t state = 7;
  for (const std::string& name : vision) {
    StEntry e{name, Tensor::empty({16, 32}, DType::BF16, ctx)};
    for (int64_t i = 0; i < 16 * 32; ++i)
      e.tensor.data<uint16_t>()[i] = uint16_t(0x3c00 + ((state = state * 1103515245u + 12345u) >> 24));
    out.push_back(std::move(e));
  }
  write_safetensors(mm + "/model.safetensors", out);
}

// The text-only synthetic Gemma 3 at `text` as a multimodal checkpoint at `mm`: its tensors under
// language_model.model. (released) or model.language_model. (`v5`), random bf16 vision tensors beside them,
// config.json's fields moved into text_config (the soft-cap dropped, here and in `text`), and a processor file.
inline void write_multimodal(const std::string& text, const std::string& mm, bool v5) {
  nlohmann::json t = nlohmann::json::parse(read_text_file(text + "/config.json"));
  t.erase("final_logit_softcapping");  // refused in a multimodal config: dropped from both
  write_file_atomic(text + "/config.json", t.dump(2));
  t.erase("architectures");
  t["model_type"] = "gemma3_text";
  const nlohmann::json cfg = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                              {"text_config", t}, {"vision_config", {{"hidden_size", 16}}}, {"mm_tokens_per_image", 4}};
  std::vector<std::string> vision;
  for (const char* name : kVisionTensors) vision.push_back((v5 ? "model." : "") + std::string(name));
  write_multimodal_as(text, mm, cfg, v5 ? "model.language_model." : "language_model.model.", vision);
}

// The Qwen3.5 MoE vision tensors the Qwen3.5 twin holds (model.visual.*, stored as transformers 5 names them).
inline constexpr const char* kQwen35VisionTensors[] = {"model.visual.blocks.0.attn.qkv.weight",
                                                      "model.visual.merger.linear_fc1.weight"};

// The text-only synthetic Qwen3.5-MoE at `text` as Qwen3_5MoeForConditionalGeneration at `mm`: its
// model.* tensors under model.language_model., lm_head.* as stored, random bf16 model.visual.* tensors.
inline void write_qwen3_5_multimodal(const std::string& text, const std::string& mm) {
  nlohmann::json t = nlohmann::json::parse(read_text_file(text + "/config.json"));
  t.erase("architectures");
  t["model_type"] = "qwen3_5_moe_text";
  const nlohmann::json cfg = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}}, {"model_type", "qwen3_5_moe"},
                              {"text_config", t}, {"vision_config", {{"depth", 1}, {"hidden_size", 16}}}};
  write_multimodal_as(text, mm, cfg, "model.language_model.",
                      std::vector<std::string>(std::begin(kQwen35VisionTensors), std::end(kQwen35VisionTensors)));
}
}  // namespace ar::test
