// The table of a decoder layer's tensors (model/block_weights.h), from the configuration: the norm
// placement's norms, then the attention module's and the feed-forward module's tensors. Order: norms,
// biases and buffers first (the order the writers copy them in), then the Linears in linear_slot order,
// then the Linears kept in 16 bit. Names are the checkpoint's (per-expert names for the experts; a fused
// checkpoint's experts carry the stored tensor and their offset in it).
#pragma once
#include <cstdint>
#include <vector>

#include "model/block_weights.h"
#include "model/config.h"

namespace ar {

// `fused_experts`: the checkpoint stores this layer's experts as mlp.experts.gate_up_proj / down_proj.
std::vector<BlockTensor> block_tensors(const ModelConfig& c, int64_t layer, bool fused_experts);

// The configuration of a one-layer model of the block's shapes (tests and benches that build a block
// without a checkpoint), and its table: the Llama / Qwen names, per-expert experts, no biases.
ModelConfig block_config(const BlockDims& d);
std::vector<BlockTensor> block_tensors(const BlockDims& d);

}  // namespace ar
