// The quantizable Linears of a decoder layer as the configuration gives them, before any weight is
// read: the Linears of the layer's table (model/block_tensors.h), names and shapes in the order of
// quant::block_linears and linear_slot (model/block_dims.h). A MoE router and shared_expert_gate are
// not Linears to quantize (they stay in 16 bit, as AutoRound keeps them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace ar {

struct LinearSpec {
  std::string name;   // in-block: self_attn.q_proj, mlp.experts.3.gate_proj
  std::string group;  // the name with an expert's index as "*" (summaries count experts together)
  int64_t out = 0, in = 0;
};

std::vector<LinearSpec> block_linear_specs(const ModelConfig& c, int64_t layer);

// Parameters of layer `layer`: its Linears, norms, and a MoE layer's router and shared_expert_gate.
int64_t block_params(const ModelConfig& c, int64_t layer);

}  // namespace ar
