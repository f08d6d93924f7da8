// GLM-4.5, 4.6 and 4.5-Air (Glm4MoeForCausalLM): grouped-query attention with q/k/v biases
// (attention_bias; o_proj has none), optional q/k norm (use_qk_norm) and partial RoPE on each head's first
// partial_rotary_factor (default 0.5) of its dims, rotate_half pairs; the first first_k_dense_replace
// layers dense, the others a MoE behind DeepSeek-V3's sigmoid router with ungated shared experts
// (arch/sigmoid_moe.cpp, with Glm4MoeConfig's defaults); the MTP layers (num_nextn_predict_layers) are
// stored past num_hidden_layers and copied unchanged into every output.
#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

void configure_glm4_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  cfg.qkv_bias = in.boolean("attention_bias", false);
  cfg.o_bias = false;
  cfg.qk_norm = in.boolean("use_qk_norm", false);
  configure_partial_rope(cfg, j, path, 0.5);
  configure_sigmoid_moe(cfg, j, path, {1, 1, 1, 1, 1.0});
}


namespace {
// llama.cpp's glm4moe: NEOX RoPE on each head's first rope.dimension_count dims; its pre-feed-forward norm
// is post_attention_norm. The MTP layers are not written (block_count = num_hidden_layers).
constexpr GgufRename kGlmRenames[] = {{"post_attention_layernorm.weight", "post_attention_norm.weight"}};

void write_glm4moe_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  set_gguf_count(keys, "rope.dimension_count", cfg.rope_dims());
  write_sigmoid_moe_keys(cfg, keys);
}

void read_glm4moe_keys(const GgufKeyReader& k, nlohmann::json& j) {
  read_partial_rope_head_keys(k, j);
  read_sigmoid_moe_keys(k, j, true);
}
}  // namespace

const GgufArch kGgufGlm4Moe{.name = "glm4moe",
                            .read_as = GgufReadAs::Moe,
                            .leading_dense = true,
                            .renames = kGlmRenames,
                            .write_keys = write_glm4moe_keys,
                            .read_keys = read_glm4moe_keys};
}  // namespace ar
