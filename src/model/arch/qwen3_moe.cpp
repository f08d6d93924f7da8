// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B, ...): the Qwen3 attention (q/k norm) and a softmax top-k router
// over num_experts SwiGLU experts of moe_intermediate_size, renormalized when norm_topk_prob; layers in
// mlp_only_layers or off the decoder_sparse_step grid keep a dense MLP of intermediate_size.
#include "model/arch/arch.h"

namespace ar {
void configure_qwen3_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_qwen3(cfg, j, path);
  configure_moe(cfg, j, path, {"num_experts", "num_local_experts", "moe_intermediate_size", nullptr, false});
}
}  // namespace ar
