#include "export/gguf_model.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "export/gguf_tokenizer.h"
#include "io/gguf_writer.h"

namespace ar {

namespace {
struct ArchName {
  const char* hf;
  const char* gguf;
  bool permute_qk;  // llama.cpp runs it with normal (adjacent-pair) rope: Q/K rows are interleaved
};
// Checked against convert_hf_to_gguf: LlamaModel (registered for LlamaForCausalLM and
// MistralForCausalLM) permutes q_proj/k_proj; Qwen2Model and Qwen3Model do not (NEOX rope).
// Mixture-of-experts (convert_hf_to_gguf's Qwen2MoeModel, Qwen3MoeModel; Mixtral is LlamaModel with
// experts): llama.cpp renormalizes the top-k weights for qwen3moe and llama, never for qwen2moe, and its
// qwen2moe / qwen3moe have no dense layers.
constexpr ArchName kArchs[] = {
    {"LlamaForCausalLM", "llama", true},
    {"MistralForCausalLM", "llama", true},
    {"Qwen2ForCausalLM", "qwen2", false},
    {"Qwen3ForCausalLM", "qwen3", false},
    {"MixtralForCausalLM", "llama", true},
    {"Qwen2MoeForCausalLM", "qwen2moe", false},
    {"Qwen3MoeForCausalLM", "qwen3moe", false},
};

// What llama.cpp's MoE graphs cannot express, refused naming the field.
void check_moe(const ModelConfig& cfg, const std::string& arch) {
  const MoeConfig& m = cfg.moe;
  auto refuse = [&](const std::string& why) {
    fail(ErrorKind::Unsupported, "GGUF export: " + cfg.architecture + " " + why + ", which llama.cpp's " + arch +
                                     " does not run");
  };
  if (arch != "llama" && (!m.mlp_only_layers.empty() || m.sparse_step != 1))
    refuse("has dense layers (mlp_only_layers / decoder_sparse_step)");
  const bool renormalized = arch != "qwen2moe";  // build_moe_ffn's norm_w in llama.cpp
  if (m.norm_topk_prob != renormalized)
    refuse(std::string("has norm_topk_prob ") + (m.norm_topk_prob ? "true" : "false"));
  if (arch == "qwen2moe" && cfg.num_heads * cfg.head_dim != cfg.hidden_size)
    refuse("has heads x head_dim != hidden_size");
}

const ArchName& arch_of(const ModelConfig& cfg) {
  for (const auto& a : kArchs)
    if (cfg.architecture == a.hf) {
      if (cfg.is_moe()) check_moe(cfg, a.gguf);
      return a;
    }
  fail(ErrorKind::Unsupported, "GGUF export: architecture '" + cfg.architecture +
                                   "' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                                   "Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)");
}

enum class Needs { Nothing, QkvBias, OBias, QkNorm, Moe, Shared };
struct LayerModule {
  const char* hf;
  const char* gguf;
  Needs bias;  // what the config must say for a .bias of this module to exist
};
constexpr LayerModule kLayerModules[] = {
    {"self_attn.q_proj", "attn_q", Needs::QkvBias},       {"self_attn.k_proj", "attn_k", Needs::QkvBias},
    {"self_attn.v_proj", "attn_v", Needs::QkvBias},       {"self_attn.o_proj", "attn_output", Needs::OBias},
    {"mlp.gate_proj", "ffn_gate", Needs::Nothing},        {"mlp.up_proj", "ffn_up", Needs::Nothing},
    {"mlp.down_proj", "ffn_down", Needs::Nothing},        {"input_layernorm", "attn_norm", Needs::Nothing},
    {"post_attention_layernorm", "ffn_norm", Needs::Nothing}, {"self_attn.q_norm", "attn_q_norm", Needs::QkNorm},
    {"self_attn.k_norm", "attn_k_norm", Needs::QkNorm},
    // mixture of experts: router, Qwen2-MoE's shared expert and its gate
    {"mlp.gate", "ffn_gate_inp", Needs::Moe},                 {"block_sparse_moe.gate", "ffn_gate_inp", Needs::Moe},
    {"mlp.shared_expert.gate_proj", "ffn_gate_shexp", Needs::Shared}, {"mlp.shared_expert.up_proj", "ffn_up_shexp", Needs::Shared},
    {"mlp.shared_expert.down_proj", "ffn_down_shexp", Needs::Shared}, {"mlp.shared_expert_gate", "ffn_gate_inp_shexp", Needs::Shared},
};

// An expert's Linear: "mlp.experts.<e>.gate_proj" (block_sparse_moe, w1/w3/w2 too) -> the stacked tensor's
// module ("ffn_gate_exps") and e; nullptr when the module is not an expert's.
const char* expert_module(const std::string& module, int64_t* expert) {
  std::string rest;
  for (const char* p : {"mlp.experts.", "block_sparse_moe.experts."})
    if (module.rfind(p, 0) == 0) rest = module.substr(std::string(p).size());
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 6 || rest.find_first_not_of("0123456789") != dot) return nullptr;
  *expert = std::stoll(rest.substr(0, dot));
  const std::string proj = rest.substr(dot + 1);
  if (proj == "gate_proj" || proj == "w1") return "ffn_gate_exps";
  if (proj == "up_proj" || proj == "w3") return "ffn_up_exps";
  if (proj == "down_proj" || proj == "w2") return "ffn_down_exps";
  return nullptr;
}

bool holds(const ModelConfig& cfg, Needs n) {
  switch (n) {
    case Needs::QkvBias: return cfg.qkv_bias;
    case Needs::OBias: return cfg.o_bias;
    case Needs::QkNorm: return cfg.qk_norm;
    case Needs::Moe: return cfg.is_moe();
    case Needs::Shared: return cfg.moe.shared_intermediate > 0;
    default: return false;
  }
}

[[noreturn]] void unknown(const std::string& hf_name, const std::string& why) {
  fail(ErrorKind::InvalidInput, "GGUF export: tensor '" + hf_name + "' " + why);
}

// "model.layers.N.<module>.<weight|bias>" -> "blk.N.<gguf module>.<weight|bias>"; *expert gets an expert
// Linear's index (its rows are part e of the stacked ffn_*_exps tensor), else -1.
std::string layer_tensor_name(const std::string& hf_name, const ModelConfig& cfg, int64_t* expert) {
  *expert = -1;
  const std::string prefix = "model.layers.";
  size_t p = prefix.size(), q = p;
  while (q < hf_name.size() && q - p < 9 && hf_name[q] >= '0' && hf_name[q] <= '9') ++q;
  if (q == p || q >= hf_name.size() || hf_name[q] != '.' || (hf_name[p] == '0' && q - p > 1))
    unknown(hf_name, "has no layer number");
  const int64_t layer = std::stoll(hf_name.substr(p, q - p));
  if (layer >= cfg.num_layers)
    unknown(hf_name, "is in layer " + std::to_string(layer) + " of a model with " + std::to_string(cfg.num_layers));
  const std::string rest = hf_name.substr(q + 1);
  const size_t dot = rest.rfind('.');
  const std::string module = rest.substr(0, dot == std::string::npos ? 0 : dot),
                    kind = dot == std::string::npos ? rest : rest.substr(dot + 1);
  if (const char* exps = expert_module(module, expert)) {
    if (!cfg.is_moe_layer(layer) || *expert >= cfg.moe.num_experts || kind != "weight")
      unknown(hf_name, "is not an expert weight of this model");
    return "blk." + std::to_string(layer) + "." + exps + ".weight";
  }
  for (const auto& m : kLayerModules) {
    if (module != m.hf) continue;
    if ((m.bias == Needs::Moe || m.bias == Needs::Shared) && (!holds(cfg, m.bias) || !cfg.is_moe_layer(layer)))
      unknown(hf_name, "is a mixture-of-experts tensor this layer does not have");
    if ((m.bias == Needs::Moe || m.bias == Needs::Shared) && kind != "weight") break;
    const bool norm = m.bias == Needs::QkNorm;
    if (norm && !cfg.qk_norm) unknown(hf_name, "is a q/k norm, which this architecture does not have");
    if (kind == "bias" && (norm || m.bias == Needs::Nothing || !holds(cfg, m.bias)))
      unknown(hf_name, "is a bias the config does not declare");
    if (kind != "weight" && kind != "bias") break;
    return "blk." + std::to_string(layer) + "." + m.gguf + "." + kind;
  }
  unknown(hf_name, "has no llama.cpp name");
}
}  // namespace

std::string gguf_architecture(const ModelConfig& cfg) { return arch_of(cfg).gguf; }

std::string gguf_tensor_name(const std::string& hf_name, const ModelConfig& cfg, int64_t* expert) {
  int64_t e = -1;
  if (!expert) expert = &e;
  *expert = -1;
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  if (hf_name.rfind("model.layers.", 0) == 0) return layer_tensor_name(hf_name, cfg, expert);
  unknown(hf_name, "has no llama.cpp name");
}

std::vector<int64_t> gguf_qk_row_order(int64_t rows, int64_t n_head) {
  if (n_head <= 0 || rows <= 0 || rows % n_head != 0 || (rows / n_head) % 2 != 0)
    fail(ErrorKind::InvalidInput, "GGUF Q/K permutation: " + std::to_string(rows) + " rows do not split into " +
                                      std::to_string(n_head) + " heads of an even size");
  const int64_t d = rows / n_head, half = d / 2;
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i) {
      order[size_t(h * d + 2 * i)] = h * d + i;             // first of the pair: HF's first half
      order[size_t(h * d + 2 * i + 1)] = h * d + half + i;  // second: HF's second half, same frequency
    }
  return order;
}

std::vector<int64_t> gguf_tensor_row_order(const std::string& hf_name, const ModelConfig& cfg) {
  if (!arch_of(cfg).permute_qk) return {};
  auto ends_with = [&](const std::string& s) {
    return hf_name.size() >= s.size() && hf_name.compare(hf_name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".self_attn.q_proj.weight") || ends_with(".self_attn.q_proj.bias"))
    return gguf_qk_row_order(cfg.num_heads * cfg.head_dim, cfg.num_heads);
  if (ends_with(".self_attn.k_proj.weight") || ends_with(".self_attn.k_proj.bias"))
    return gguf_qk_row_order(cfg.num_kv_heads * cfg.head_dim, cfg.num_kv_heads);
  return {};
}

std::vector<GgufExtraTensor> gguf_extra_tensors(const ModelConfig& cfg) {
  const RopeScaling& rs = cfg.rope_scaling;
  if (rs.type == "default") return {};
  if (rs.type != "llama3" || !arch_of(cfg).permute_qk)
    fail(ErrorKind::Unsupported, "GGUF export: rope scaling '" + rs.type + "' on " + cfg.architecture +
                                     " is not supported (llama3 scaling on the llama architecture only)");
  // convert_hf_to_gguf's llama3 factors: 1 for short wavelengths, `factor` for long ones, a smooth
  // blend between; llama.cpp divides each rope frequency by its factor. We take the original context
  // from rope_scaling (where HF reads it), which the converter reads from the top level, default 8192;
  // the two agree for every published Llama 3.x config.
  const int64_t dim = cfg.head_dim;
  const double old_ctx = double(rs.original_max_position_embeddings), low_wl = old_ctx / rs.low_freq_factor,
               high_wl = old_ctx / rs.high_freq_factor;
  GgufExtraTensor t{"rope_freqs.weight", {uint64_t(dim / 2)}, {}};
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(float(cfg.rope_theta), float(i) / float(dim));  // float32, as torch
    const double wavelen = 2 * std::numbers::pi / double(freq);
    float f = 1;
    if (wavelen < high_wl) f = 1;
    else if (wavelen > low_wl) f = float(rs.factor);
    else {
      const double smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      f = float(1 / ((1 - smooth) / rs.factor + smooth));
    }
    t.data.push_back(f);
  }
  return {t};
}

void add_gguf_model_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& model_dir, uint32_t file_type,
                             const std::string& name) {
  const std::string arch = gguf_architecture(cfg);
  gguf_extra_tensors(cfg);  // refuses rope scaling llama.cpp would not run, before anything is written
  auto u32 = [&](const std::string& key, int64_t v) {
    if (v < 0 || v > int64_t(UINT32_MAX)) fail(ErrorKind::InvalidInput, "GGUF export: " + key + " = " + std::to_string(v) + " does not fit u32");
    w.add_u32(key, uint32_t(v));
  };
  w.add_string("general.architecture", arch);
  w.add_string("general.name", name);
  w.add_u32("general.file_type", file_type);
  w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION of today's k-quant layouts
  if (!w.has_key("general.alignment")) w.add_u32("general.alignment", w.alignment());
  u32(arch + ".context_length", cfg.max_position_embeddings);
  u32(arch + ".embedding_length", cfg.hidden_size);
  u32(arch + ".block_count", cfg.num_layers);
  u32(arch + ".feed_forward_length", cfg.intermediate_size);
  u32(arch + ".attention.head_count", cfg.num_heads);
  u32(arch + ".attention.head_count_kv", cfg.num_kv_heads);
  // llama.cpp takes the head size from key_length, else embedding_length / head_count; Qwen3 has
  // head_dim != hidden / heads, so it is always written.
  u32(arch + ".attention.key_length", cfg.head_dim);
  u32(arch + ".attention.value_length", cfg.head_dim);
  w.add_f32(arch + ".rope.freq_base", float(cfg.rope_theta));
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", float(cfg.rms_norm_eps));
  u32(arch + ".rope.dimension_count", cfg.head_dim);  // rope over the whole head
  u32(arch + ".vocab_size", cfg.vocab_size);
  if (cfg.is_moe()) {  // what convert_hf_to_gguf writes for the MoE families
    u32(arch + ".expert_count", cfg.moe.num_experts);
    u32(arch + ".expert_used_count", cfg.moe.top_k);
    if (arch != "llama") u32(arch + ".expert_feed_forward_length", cfg.moe.expert_intermediate);
    if (cfg.moe.shared_intermediate) u32(arch + ".expert_shared_feed_forward_length", cfg.moe.shared_intermediate);
  }
  add_gguf_vocab(w, read_gguf_vocab(model_dir, cfg.vocab_size));
}

}  // namespace ar
