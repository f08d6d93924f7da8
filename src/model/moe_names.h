// Checkpoint names of a mixture-of-experts layer's tensors, in both layouts:
//  - per expert (what save_pretrained writes): <layer>.mlp.experts.<e>.{gate,up,down}_proj.weight,
//    Mixtral's <layer>.block_sparse_moe.experts.<e>.{w1,w3,w2}.weight (or {gate,up,down}_proj, as
//    AutoRound writes quantized Mixtral), router mlp.gate.weight (Mixtral: block_sparse_moe.gate.weight);
//  - fused (transformers 5's in-memory layout, shipped by newer checkpoints): <layer>.mlp.experts.gate_up_proj
//    [E, 2I, C] (gate rows first, then up) and <layer>.mlp.experts.down_proj [E, C, I], router mlp.gate.weight.
// gpt-oss (MoeConfig::gpt_oss): router mlp.router.{weight,bias}; per expert also <...>_proj.bias; fused
// <layer>.mlp.experts.gate_up_proj [E, C, 2I] (gate and up interleaved by column, each Linear transposed)
// + gate_up_proj_bias [E, 2I], down_proj [E, I, C] + down_proj_bias [E, C].
// Qwen2-MoE's shared expert: <layer>.mlp.shared_expert.{gate,up,down}_proj.weight and
// <layer>.mlp.shared_expert_gate.weight [1, C], in both layouts.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"

namespace ar {

enum class ExpertProj { Gate, Up, Down };

// In-block (short) module names, as the tuner and every output name them: mlp.experts.<e>.gate_proj
// (Mixtral: block_sparse_moe.experts.<e>.gate_proj, as AutoRound writes Mixtral), mlp.shared_expert.gate_proj.
std::string expert_linear_name(bool mixtral_names, int64_t expert, ExpertProj proj);
std::string shared_linear_name(ExpertProj proj);

// The checkpoint's name of an expert's weight (Mixtral's w1/w3/w2 when the checkpoint spells them so).
std::string expert_weight_name(const ModelConfig& c, int64_t layer, int64_t expert, ExpertProj proj);
std::string fused_experts_name(int64_t layer, ExpertProj proj);  // Gate and Up: the gate_up_proj tensor
std::string fused_bias_name(int64_t layer, ExpertProj proj);     // gpt-oss: gate_up_proj_bias, down_proj_bias
// The router's in-block module (mlp.gate, Mixtral's block_sparse_moe.gate, gpt-oss's mlp.router) and weight.
std::string router_module(const ModelConfig& c, bool fused);
std::string router_weight_name(const ModelConfig& c, int64_t layer, bool fused);
std::string shared_expert_name(int64_t layer, ExpertProj proj);
std::string shared_gate_name(int64_t layer);

}  // namespace ar
