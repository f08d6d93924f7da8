// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B, ...): the Qwen3 attention (q/k norm) and a softmax top-k router
// over num_experts SwiGLU experts of moe_intermediate_size, renormalized when norm_topk_prob; layers in
// mlp_only_layers or off the decoder_sparse_step grid keep a dense MLP of intermediate_size.
#include "model/arch/arch.h"

namespace ar {
void configure_qwen3_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_qwen3(cfg, j, path);
  configure_moe(cfg, j, path, {"num_experts", "num_local_experts", "moe_intermediate_size", nullptr, false});
}

namespace {
void write_qwen3_moe_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  set_gguf_count(keys, "expert_feed_forward_length", cfg.moe.expert_intermediate);
}
void read_qwen3_moe_keys(const GgufKeyReader& k, nlohmann::json& j) { read_qwen_moe_keys(k, j, true); }
}  // namespace

// llama.cpp's qwen3moe always renormalizes the top-k weights and has no dense layers.
const GgufArch kGgufQwen3Moe{.name = "qwen3moe",
                             .read_as = GgufReadAs::Moe,
                             .topk_norm = GgufTopkNorm::Always,
                             .write_keys = write_qwen3_moe_keys,
                             .read_keys = read_qwen3_moe_keys};
}  // namespace ar
