// Rotary tables for a config: inv_freq[i] = theta^(-2i/D) over the rotated dims D (ModelConfig::rope_dims),
// optionally linearly scaled (inv_freq / factor), llama3-scaled (HF `_compute_llama3_parameters`) or
// YaRN-blended (`_compute_yarn_parameters`),
// cos/sin[pos, i] = cos/sin(pos * inv_freq[i]) times YaRN's attention factor for pos < max_pos, computed in
// double and stored in fp32.
#pragma once
#include <vector>

#include "model/config.h"

namespace ar {

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling);
// The factor YaRN applies to cos and sin (1 for every other scaling).
double rope_attention_factor(const RopeScaling& scaling);

struct RopeTable {
  int64_t max_pos = 0, half = 0;
  std::vector<float> cos, sin;  // [max_pos, half]
};
RopeTable make_rope_table(const ModelConfig& cfg, int64_t max_pos);

// The tables a model's layers read: the model's RoPE, and with ModelConfig::sliding_rope (Gemma 3) the
// sliding layers' own.
struct RopeTables {
  RopeTable full, sliding;
  std::vector<uint8_t> sliding_layers;  // empty: every layer reads `full`
  const RopeTable& layer(int64_t l) const;
};
RopeTables make_rope_tables(const ModelConfig& cfg, int64_t max_pos);

}  // namespace ar
