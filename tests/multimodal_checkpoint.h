// A multimodal checkpoint made from a text-only one, for the pipeline and multi-process tests: the
// synthetic Gemma 3 inside Gemma3ForConditionalGeneration with made-up vision tensors beside it.
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

// The text-only synthetic Gemma 3 at `text` as a multimodal checkpoint at `mm`: its tensors under
// language_model.model. (released) or model.language_model. (`v5`), random bf16 vision tensors beside them,
// config.json's fields moved into text_config (the soft-cap dropped, here and in `text`), and a processor file.
inline void write_multimodal(const std::string& text, const std::string& mm, bool v5) {
  std::filesystem::create_directories(mm);
  for (const auto& e : std::filesystem::directory_iterator(text))
    if (e.path().extension() != ".safetensors" && e.path().filename() != "config.json")
      std::filesystem::copy_file(e.path(), mm + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  nlohmann::json t = nlohmann::json::parse(read_text_file(text + "/config.json"));
  t.erase("final_logit_softcapping");  // refused in a multimodal config: dropped from both
  write_file_atomic(text + "/config.json", t.dump(2));
  t.erase("architectures");
  t["model_type"] = "gemma3_text";
  const nlohmann::json cfg = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                              {"text_config", t}, {"vision_config", {{"hidden_size", 16}}}, {"mm_tokens_per_image", 4}};
  write_file_atomic(mm + "/config.json", cfg.dump(2));
  write_file_atomic(mm + "/preprocessor_config.json", "{\"image_processor_type\": \"Gemma3ImageProcessor\"}\n");
  Context ctx;
  auto f = SafetensorsFile::open(text + "/model.safetensors");
  std::vector<StEntry> out;
  const std::string prefix = v5 ? "model.language_model." : "language_model.model.";
  for (const auto& s : f->header().tensors) {
    StEntry e{prefix + s.name.substr(6), Tensor::empty(s.shape, s.dtype, ctx)};  // "model." -> prefix
    std::memcpy(e.tensor.raw(), f->bytes(s), e.tensor.nbytes());
    out.push_back(std::move(e));
  }
  uint32_t state = 7;
  for (const char* name : kVisionTensors) {
    StEntry e{(v5 ? "model." : "") + std::string(name), Tensor::empty({16, 32}, DType::BF16, ctx)};
    for (int64_t i = 0; i < 16 * 32; ++i)
      e.tensor.data<uint16_t>()[i] = uint16_t(0x3c00 + ((state = state * 1103515245u + 12345u) >> 24));
    out.push_back(std::move(e));
  }
  write_safetensors(mm + "/model.safetensors", out);
}

}  // namespace ar::test
