// Qwen3-Next (Qwen3NextForCausalLM: Qwen3-Next-80B-A3B, Qwen3-Coder-Next): a hybrid of Gated DeltaNet
// linear-attention layers (layer_types' "linear_attention"; without layer_types every
// full_attention_interval-th layer, 4 by default, is full attention) and gated full-attention layers
// (grouped-query attention with q/k norm, partial RoPE on each head's first partial_rotary_factor of its
// dims, 0.25 by default, and a sigmoid output gate from q_proj), every RMSNorm applied as 1 + w except the
// linear layers' gated norm; a MoE of softmax top-k experts with a sigmoid-gated shared expert (Qwen2-MoE's),
// layers in mlp_only_layers or off the decoder_sparse_step grid dense. Absent fields take
// Qwen3NextConfig's defaults (transformers 5.25).
#include <string>
#include <vector>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
// layer_types, or full_attention_interval's pattern (transformers' default when layer_types is absent).
void configure_layer_kinds(ModelConfig& cfg, const JsonIn& in) {
  cfg.delta_layers.assign(size_t(cfg.num_layers), 0);
  if (!in.has("layer_types")) {
    const int64_t interval = positive_or(in, "full_attention_interval", 4);
    for (int64_t l = 0; l < cfg.num_layers; ++l) cfg.delta_layers[size_t(l)] = (l + 1) % interval ? 1 : 0;
    return;
  }
  cfg.delta_layers = layer_type_flags(in, cfg.num_layers, "linear_attention", "full_attention");
}

void configure_delta_dims(ModelConfig& cfg, const JsonIn& in) {
  DeltaDims& d = cfg.delta;
  d.Hk = positive_or(in, "linear_num_key_heads", 16);
  d.Hv = positive_or(in, "linear_num_value_heads", 32);
  d.Dk = positive_or(in, "linear_key_head_dim", 128);
  d.Dv = positive_or(in, "linear_value_head_dim", 128);
  d.K = positive_or(in, "linear_conv_kernel_dim", 4);
  if (d.Hv % d.Hk)
    in.at("linear_num_value_heads").bad(std::to_string(d.Hv) + " is not a multiple of linear_num_key_heads " +
                                        std::to_string(d.Hk));
}
}  // namespace

void configure_hybrid_linear(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  cfg.qk_norm = true;
  cfg.qkv_bias = cfg.o_bias = in.boolean("attention_bias", false);
  cfg.norm_unit_offset = true;
  cfg.attn_out_gate = true;
  configure_partial_rope(cfg, j, path, 0.25);
  configure_layer_kinds(cfg, in);
  configure_delta_dims(cfg, in);
}

void configure_qwen3_next(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  configure_hybrid_linear(cfg, j, path);
  const JsonIn in(j, path);
  if (in.has("num_experts") && in.at("num_experts").i64() == 0) return;  // transformers: every layer dense
  configure_moe(cfg, j, path, {"num_experts", nullptr, "moe_intermediate_size", "shared_expert_intermediate_size", false});
  if (cfg.moe.shared_intermediate == 0)
    fail(ErrorKind::InvalidInput, path + ": field 'shared_expert_intermediate_size': missing (Qwen3-Next has a shared expert)");
}

}  // namespace ar
