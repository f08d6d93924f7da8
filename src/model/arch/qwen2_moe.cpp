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
}  // namespace ar
