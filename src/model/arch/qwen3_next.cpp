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

void check_hybrid_linear_gguf(const ModelConfig& cfg, const std::string& arch) {
  if (cfg.delta.Dk != cfg.delta.Dv) refuse_gguf(cfg, arch, "has linear_key_head_dim != linear_value_head_dim");
  if (cfg.qkv_bias || cfg.o_bias) refuse_gguf(cfg, arch, "has attention_bias true");
}

// convert_hf_to_gguf's Qwen3NextModel keys; the layer kinds always as attention.recurrent_layers, which
// llama.cpp reads before full_attention_interval. The MTP layers are not written (nextn_predict_layers
// absent; llama.cpp does not need them to run the model).
void write_hybrid_linear_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys) {
  const DeltaDims& d = cfg.delta;
  if (cfg.is_moe()) {
    set_gguf_count(keys, "expert_feed_forward_length", cfg.moe.expert_intermediate);
    set_gguf_count(keys, "expert_shared_feed_forward_length", cfg.moe.shared_intermediate);
  }
  set_gguf_count(keys, "ssm.conv_kernel", d.K);
  set_gguf_count(keys, "ssm.state_size", d.Dk);
  set_gguf_count(keys, "ssm.group_count", d.Hk);
  set_gguf_count(keys, "ssm.time_step_rank", d.Hv);
  set_gguf_count(keys, "ssm.inner_size", d.value_dim());
  set_gguf_key(keys, "attention.recurrent_layers", std::vector<bool>(cfg.delta_layers.begin(), cfg.delta_layers.end()));
  set_gguf_count(keys, "rope.dimension_count", cfg.rope_dims());
}

void read_hybrid_linear_keys(const GgufKeyReader& k, nlohmann::json& j) {
  read_partial_rope_head_keys(k, j);
  const int64_t layers = j["num_hidden_layers"].get<int64_t>();
  const int64_t hv = k.required_count("ssm.time_step_rank"), inner = k.required_count("ssm.inner_size");
  if (inner % hv) k.bad("ssm.inner_size", "is not a multiple of ssm.time_step_rank " + std::to_string(hv));
  j["linear_num_key_heads"] = k.required_count("ssm.group_count");
  j["linear_num_value_heads"] = hv;
  j["linear_key_head_dim"] = k.required_count("ssm.state_size");
  j["linear_value_head_dim"] = inner / hv;
  j["linear_conv_kernel_dim"] = k.required_count("ssm.conv_kernel");
  if (k.natural("nextn_predict_layers").value_or(0) > 0) k.unsupported("nextn_predict_layers", "> 0: MTP layers are not read");
  std::vector<bool> linear = k.flags("attention.recurrent_layers").value_or(std::vector<bool>{});
  if (!k.has("attention.recurrent_layers")) {
    const int64_t interval = k.count("full_attention_interval").value_or(4);
    for (int64_t l = 0; l < layers; ++l) linear.push_back((l + 1) % interval != 0);
  }
  if (int64_t(linear.size()) != layers)
    k.bad("attention.recurrent_layers", "has " + std::to_string(linear.size()) + " entries for " + std::to_string(layers) + " layers");
  j["layer_types"] = nlohmann::json::array();
  for (bool l : linear) j["layer_types"].push_back(l ? "linear_attention" : "full_attention");
  if (!k.has("expert_count")) return;
  j["num_experts"] = k.required_count("expert_count");
  j["num_experts_per_tok"] = k.required_count("expert_used_count");
  j["moe_intermediate_size"] = k.required_count("expert_feed_forward_length");
  j["norm_topk_prob"] = true;  // llama.cpp's graphs always renormalize
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array();
  j["shared_expert_intermediate_size"] =
      k.count("expert_shared_feed_forward_length").value_or(j["intermediate_size"].get<int64_t>());
}

namespace {
// llama.cpp's qwen3next: a MoE in every layer (zero experts and dense layers refused by its loader), the
// top-k always renormalized; its pre-feed-forward norm is post_attention_norm.
constexpr GgufRename kPostAttentionNorm[] = {{"post_attention_layernorm.weight", "post_attention_norm.weight"}};
void check_qwen3next_gguf(const ModelConfig& cfg) {
  if (!cfg.is_moe()) refuse_gguf(cfg, "qwen3next", "has no experts (num_experts 0)");
  check_hybrid_linear_gguf(cfg, "qwen3next");
}
}  // namespace

const GgufArch kGgufQwen3Next{.name = "qwen3next",
                              .read_as = GgufReadAs::Moe,
                              .topk_norm = GgufTopkNorm::Always,
                              .renames = kPostAttentionNorm,
                              .check = check_qwen3next_gguf,
                              .write_keys = write_hybrid_linear_keys,
                              .read_keys = read_hybrid_linear_keys};

}  // namespace ar
