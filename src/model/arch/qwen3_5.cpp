// Qwen3.5 (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, and the language model of the released multimodal
// checkpoints Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration): Qwen3-Next's hybrid
// layers (arch/qwen3_next.cpp: Gated DeltaNet and gated full attention, norms as 1 + w) with the linear
// layers' projections split (in_proj_qkv in the conv's order, in_proj_z, in_proj_b, in_proj_a:
// DeltaDims::split); a dense MLP in every layer, or in the MoE family a softmax top-k MoE in every layer,
// always renormalized, with the sigmoid-gated shared expert. RoPE: rope_parameters' interleaved mRoPE
// (mrope_section) rotates by the text, height and width positions, which are one position for text, so a
// text sequence runs plain RoPE on each head's first partial_rotary_factor (0.25) of its dims. Absent
// fields take Qwen3_5TextConfig's / Qwen3_5MoeTextConfig's defaults (transformers 5.25).
#include <string>
#include <utility>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
void set_absent(nlohmann::json& j, std::initializer_list<std::pair<const char*, nlohmann::json>> defaults) {
  for (const auto& [key, value] : defaults)
    if (!j.contains(key)) j[key] = value;
}
}  // namespace

void qwen3_5_text_defaults(nlohmann::json& j) {
  set_absent(j, {{"vocab_size", 248320}, {"hidden_size", 4096}, {"intermediate_size", 12288},
                 {"num_hidden_layers", 32}, {"num_attention_heads", 16}, {"num_key_value_heads", 4},
                 {"head_dim", 256}, {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6}});
}

void qwen3_5_moe_text_defaults(nlohmann::json& j) {
  set_absent(j, {{"vocab_size", 248320}, {"hidden_size", 2048}, {"num_hidden_layers", 40},
                 {"num_attention_heads", 16}, {"num_key_value_heads", 2}, {"head_dim", 256},
                 {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6}, {"moe_intermediate_size", 512},
                 {"shared_expert_intermediate_size", 512}, {"num_experts_per_tok", 8}, {"num_experts", 256}});
  if (!j.contains("intermediate_size")) j["intermediate_size"] = j["moe_intermediate_size"];  // no dense layer reads it
}

void configure_qwen3_5(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_hybrid_linear(cfg, j, path);
  cfg.delta.split = true;
  cfg.mrope_section = {11, 11, 10};  // Qwen3_5TextConfig's default
  const JsonIn in(j, path);
  for (const char* holder : {"rope_parameters", "rope_scaling"}) {
    if (!in.has(holder) || !in.at(holder).is_object() || !in.at(holder).has("mrope_section")) continue;
    const JsonIn s = in.at(holder).at("mrope_section");
    if (!s.is_array() || s.size() > 4) s.bad("is not a list of at most 4 section sizes");
    cfg.mrope_section.clear();
    for (size_t i = 0; i < s.size(); ++i) {
      cfg.mrope_section.push_back(s.at(i).i64());
      if (cfg.mrope_section.back() < 0) s.at(i).bad("is negative");
    }
    break;
  }
}

void configure_qwen3_5_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_qwen3_5(cfg, j, path);
  // Every layer is MoE and the top-k always renormalized: transformers' Qwen3_5Moe reads neither
  // decoder_sparse_step, mlp_only_layers nor norm_topk_prob.
  nlohmann::json moe = j;
  for (const char* k : {"decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"}) moe.erase(k);
  configure_moe(cfg, moe, path, {"num_experts", nullptr, "moe_intermediate_size", "shared_expert_intermediate_size", true});
  if (cfg.moe.shared_intermediate == 0)
    fail(ErrorKind::InvalidInput, path + ": field 'shared_expert_intermediate_size': missing (Qwen3.5-MoE has a shared expert)");
}

namespace {
// llama.cpp's qwen35 / qwen35moe: qwen3next's keys and layout with the value heads tiled, and the mRoPE
// sections (4 entries; convert_hf_to_gguf's _Qwen35MRopeMixin), which text runs as plain RoPE.
constexpr GgufRename kPostAttentionNorm[] = {{"post_attention_layernorm.weight", "post_attention_norm.weight"}};
void write_qwen35_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  write_hybrid_linear_keys(cfg, keys);
  std::vector<int32_t> sections(4, 0);
  for (size_t i = 0; i < cfg.mrope_section.size(); ++i) sections[i] = int32_t(cfg.mrope_section[i]);
  set_gguf_key(keys, "rope.dimension_sections", sections);
}
void check_qwen35_gguf(const ModelConfig& cfg) { check_hybrid_linear_gguf(cfg, "qwen35"); }
void check_qwen35moe_gguf(const ModelConfig& cfg) { check_hybrid_linear_gguf(cfg, "qwen35moe"); }
}  // namespace

const GgufArch kGgufQwen35{.name = "qwen35",
                           .read_as = GgufReadAs::Dense,
                           .v_heads_tiled = true,
                           .renames = kPostAttentionNorm,
                           .check = check_qwen35_gguf,
                           .write_keys = write_qwen35_keys,
                           .read_keys = read_hybrid_linear_keys};
const GgufArch kGgufQwen35Moe{.name = "qwen35moe",
                              .read_as = GgufReadAs::Moe,
                              .topk_norm = GgufTopkNorm::Always,
                              .v_heads_tiled = true,
                              .renames = kPostAttentionNorm,
                              .check = check_qwen35moe_gguf,
                              .write_keys = write_qwen35_keys,
                              .read_keys = read_hybrid_linear_keys};

}  // namespace ar
