// Mixtral: the Mistral attention and top-k (2) of num_local_experts SwiGLU experts of intermediate_size,
// weighted by the softmax over the selected logits (= the top-k probabilities renormalized). Checkpoints
// name the experts block_sparse_moe.experts.<e>.w1 (gate), w3 (up), w2 (down) and the router
// block_sparse_moe.gate; transformers 5's in-memory layout uses mlp.* like the Qwen families.
#include "model/arch/arch.h"

namespace ar {
void configure_mixtral(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_mistral(cfg, j, path);
  configure_moe(cfg, j, path, {"num_local_experts", "num_experts", "intermediate_size", nullptr, true});
  cfg.moe.mixtral_names = true;
}

namespace {
void read_mixtral_keys(const GgufKeyReader& k, nlohmann::json& j) {  // experts of feed_forward_length
  read_gqa_head_keys(k, j);
  j["num_local_experts"] = k.required_count("expert_count");
  j["num_experts_per_tok"] = k.required_count("expert_used_count");
}
}  // namespace

// llama with experts: a llama file with expert_count reads back as Mixtral; top-k renormalized.
const GgufArch kGgufMixtral{.name = "llama",
                            .read_as = GgufReadAs::Moe,
                            .permute_qk = true,
                            .topk_norm = GgufTopkNorm::Always,
                            .read_keys = read_mixtral_keys};
}  // namespace ar
