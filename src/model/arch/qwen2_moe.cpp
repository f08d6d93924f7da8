// Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): the Qwen2 attention (q/k/v bias, `qkv_bias` in transformers 5
// configs), routed experts as Qwen3-MoE, plus one shared expert of shared_expert_intermediate_size whose
// output is scaled by sigmoid(shared_expert_gate(h)) and added to the routed experts'.
#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {
void configure_qwen2_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_qwen2(cfg, j, path);
  cfg.qkv_bias = JsonIn(j, path).boolean("qkv_bias", true);
  configure_moe(cfg, j, path, {"num_experts", nullptr, "moe_intermediate_size", "shared_expert_intermediate_size", false});
  if (cfg.moe.shared_intermediate == 0)
    fail(ErrorKind::InvalidInput, path + ": field 'shared_expert_intermediate_size': missing (Qwen2-MoE has a shared expert)");
}

namespace {
void check_qwen2_moe_gguf(const ModelConfig& cfg) {
  if (cfg.num_heads * cfg.head_dim != cfg.hidden_size) refuse_gguf(cfg, "qwen2moe", "has heads x head_dim != hidden_size");
}
void write_qwen2_moe_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  set_gguf_count(keys, "expert_feed_forward_length", cfg.moe.expert_intermediate);
  set_gguf_count(keys, "expert_shared_feed_forward_length", cfg.moe.shared_intermediate);
}
void read_qwen2_moe_keys(const GgufKeyReader& k, nlohmann::json& j) {
  read_qwen_moe_keys(k, j, false);
  // llama.cpp's default for a missing key: feed_forward_length
  j["shared_expert_intermediate_size"] =
      k.count("expert_shared_feed_forward_length").value_or(j["intermediate_size"].get<int64_t>());
}
}  // namespace

// llama.cpp's qwen2moe never renormalizes the top-k weights and has no dense layers.
const GgufArch kGgufQwen2Moe{.name = "qwen2moe",
                             .read_as = GgufReadAs::Moe,
                             .topk_norm = GgufTopkNorm::Never,
                             .check = check_qwen2_moe_gguf,
                             .write_keys = write_qwen2_moe_keys,
                             .read_keys = read_qwen2_moe_keys};
}  // namespace ar
