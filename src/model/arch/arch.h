// Architecture registry: one file per family in this folder, one row per family in registry.cpp.
// Each family maps its config.json quirks onto ModelConfig (bias, q/k norm, sliding window, ...) and
// describes itself to llama.cpp's GGUF (gguf_arch.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/json_file.h"
#include "model/arch/gguf_arch.h"
#include "model/config.h"

namespace ar {

struct ArchSpec {
  const char* name;  // HF "architectures" entry
  // Applies family-specific fields after the common Llama-style fields are parsed.
  void (*configure)(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
  const GgufArch* gguf;  // null: no GGUF output (llama.cpp does not run the family)
  // The defaults of the family's config class, set where config.json leaves a field out (released
  // multimodal configs list few of their text_config's fields); null: every field is required or
  // defaulted by `configure`.
  void (*defaults)(nlohmann::json& j) = nullptr;
  // A multimodal checkpoint: the language model's fields are config.json's text_config (ModelConfig::multimodal).
  bool multimodal = false;
};

const ArchSpec* find_arch(const std::string& name);
std::string supported_archs();
// The family a GGUF file of llama.cpp architecture `gguf` reads back as (GgufArch::read_as; `moe`: the
// file has experts); null when none does.
const ArchSpec* find_arch_for_gguf(const std::string& gguf, bool moe);
// The families with a GGUF output, and the llama.cpp architectures read back, for messages.
std::string gguf_written_archs();
std::string gguf_read_archs();

// Family hooks (arch/<family>.cpp).
void configure_llama(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_mistral(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_qwen2(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_qwen3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_qwen2_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_qwen3_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_mixtral(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_deepseek_v3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_deepseek_v32(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_glm4_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_gpt_oss(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_gemma3(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void gemma3_text_defaults(nlohmann::json& j);
void configure_qwen3_next(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_qwen3_5(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void configure_qwen3_5_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
void qwen3_5_text_defaults(nlohmann::json& j);
void qwen3_5_moe_text_defaults(nlohmann::json& j);
// What Qwen3-Next and Qwen3.5 share (arch/qwen3_next.cpp): the layer kinds (layer_types or
// full_attention_interval), Gated DeltaNet's sizes, the gated full attention with q/k norm and partial RoPE,
// norms as 1 + w.
void configure_hybrid_linear(ModelConfig& cfg, const nlohmann::json& j, const std::string& path);
// Their GGUF keys (arch/qwen3_next.cpp): the linear layers' ssm.* sizes and attention.recurrent_layers,
// partial RoPE's rope.dimension_count, the experts' lengths; refused: what llama.cpp's qwen3next / qwen35 /
// qwen35moe graphs do not run (key and value heads of different widths, attention biases).
void check_hybrid_linear_gguf(const ModelConfig& cfg, const std::string& arch);
void write_hybrid_linear_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys);
// Read back: heads with partial RoPE, the linear layers' sizes and kinds (attention.recurrent_layers, else
// full_attention_interval's pattern), the experts when the file has expert_count; MTP layers refused.
void read_hybrid_linear_keys(const GgufKeyReader& k, nlohmann::json& j);
// Their GGUF rows (the family's file).
extern const GgufArch kGgufLlama, kGgufMistral, kGgufQwen2, kGgufQwen3, kGgufQwen2Moe, kGgufQwen3Moe, kGgufMixtral,
    kGgufDeepseekV3, kGgufGlm4Moe, kGgufGptOss, kGgufGemma3, kGgufQwen3Next, kGgufQwen35, kGgufQwen35Moe;
// DeepSeek-V3's latent attention fields (arch/deepseek_v3.cpp), shared with V3.2.
void configure_mla(ModelConfig& cfg, const nlohmann::json& j, const JsonIn& in);

// Where a MoE family keeps its fields (arch/moe_fields.cpp reads and checks them into cfg.moe).
struct MoeFields {
  const char* experts;              // "num_experts" | "num_local_experts"
  const char* alias;                // the other spelling transformers accepts (null: none)
  const char* intermediate;         // "moe_intermediate_size" | "intermediate_size"
  const char* shared_intermediate;  // null: no shared expert
  bool always_norm_topk;            // Mixtral: softmax over the selected logits
};
void configure_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path, const MoeFields& f);
// Qwen-MoE GGUF keys read back (expert_count, expert_used_count, expert_feed_forward_length; every layer
// MoE, llama.cpp's fixed top-k renormalization `norm_topk`), with grouped-query attention's head keys.
void read_qwen_moe_keys(const GgufKeyReader& k, nlohmann::json& j, bool norm_topk);

// The MoE families behind DeepSeek-V3's sigmoid router (arch/sigmoid_moe.cpp), with the defaults their
// transformers config classes give absent fields.
struct SigmoidMoeDefaults {
  int64_t n_group, topk_group, first_dense, shared;
  double scaling;
};
void configure_sigmoid_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path,
                           const SigmoidMoeDefaults& defaults);
// layer_types (arch/sliding_layers.cpp): ModelConfig::sliding_layers and sliding_window (default_window
// when absent; null: no window), or default_sliding's pattern when config.json lists no layer types (null:
// none sliding).
void configure_sliding_layers(ModelConfig& cfg, const nlohmann::json& j, const std::string& path,
                              int64_t default_window, bool (*default_sliding)(int64_t layer));
// layer_types' entries as one flag per layer (1: `flagged`, 0: `other`), refusing any other entry or count.
std::vector<uint8_t> layer_type_flags(const JsonIn& in, int64_t layers, const char* flagged, const char* other);
// The sliding layers in GGUF (attention.sliding_window_pattern, as llama.cpp's set_swa_pattern reads it: a
// period n, layer l sliding when l % n < n - 1, or one bool per layer): written as nothing when they follow
// the architecture's default period, else as the flags; read back as config.json's layer_types.
void write_sliding_pattern(const ModelConfig& cfg, std::vector<GgufKey>& keys, int64_t default_period);
nlohmann::json read_layer_types(const GgufKeyReader& k, int64_t layers, int64_t default_period);

// Partial RoPE (arch/partial_rope.cpp): ModelConfig::rotary_dims from partial_rotary_factor (top level or
// in rope_parameters; default_factor when absent), refused unless it gives an even number of head dims.
void configure_partial_rope(ModelConfig& cfg, const nlohmann::json& j, const std::string& path, double default_factor);

// Field helpers (arch/moe_fields.cpp): a positive integer or `def` when absent (or null); whether a field
// is present as null (transformers' None, which JsonIn::has reports as absent).
int64_t positive_or(const JsonIn& in, const char* key, int64_t def);
bool null_field(const nlohmann::json& j, const char* key);

}  // namespace ar
