#include "export/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "export/gguf_tokenizer.h"
#include "io/gguf_writer.h"
#include "model/arch/arch.h"
#include "model/block_tensors.h"

namespace ar {

namespace {
const GgufArch* find_gguf_arch(const ModelConfig& cfg) {
  const ArchSpec* a = find_arch(cfg.architecture);
  return a ? a->gguf : nullptr;
}

// What llama.cpp's MoE graphs cannot express, refused naming the field: dense layers other than leading
// ones, a top-k renormalization other than the graph's fixed choice.
void check_moe(const ModelConfig& cfg, const GgufArch& g) {
  const MoeConfig& m = cfg.moe;
  if (!g.leading_dense && (!m.mlp_only_layers.empty() || m.sparse_step != 1 || m.first_dense > 0))
    refuse_gguf(cfg, g.name, "has dense layers (mlp_only_layers / decoder_sparse_step)");
  if ((g.topk_norm == GgufTopkNorm::Always && !m.norm_topk_prob) || (g.topk_norm == GgufTopkNorm::Never && m.norm_topk_prob))
    refuse_gguf(cfg, g.name, std::string("has norm_topk_prob ") + (m.norm_topk_prob ? "true" : "false"));
}

const GgufArch& arch_of(const ModelConfig& cfg) {
  const GgufArch* g = find_gguf_arch(cfg);
  if (!g)
    fail(ErrorKind::Unsupported, "GGUF export: architecture '" + cfg.architecture + "' is not supported (" +
                                     gguf_written_archs() + ")");
  if (cfg.is_moe()) check_moe(cfg, *g);
  if (g->check) g->check(cfg);
  return *g;
}

// llama.cpp's names of the in-layer modules (LLM_TENSOR_*), ".weight" / ".bias" kept. MLA's kv_b_proj
// names its attn_v_b part (gguf_mla_k_b_name gives the other).
struct LayerModule {
  const char* hf;
  const char* gguf;
};
constexpr LayerModule kLayerModules[] = {
    {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"},
    // multi-head latent attention (deepseek2)
    {"self_attn.q_a_proj", "attn_q_a"}, {"self_attn.q_a_layernorm", "attn_q_a_norm"}, {"self_attn.q_b_proj", "attn_q_b"},
    {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"}, {"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
    {"self_attn.kv_b_proj", "attn_v_b"},
    // mixture of experts: routers, shared experts (Qwen2-MoE's behind its gate, DeepSeek's ungated)
    {"mlp.gate", "ffn_gate_inp"}, {"block_sparse_moe.gate", "ffn_gate_inp"},
    {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"}, {"mlp.shared_expert.up_proj", "ffn_up_shexp"},
    {"mlp.shared_expert.down_proj", "ffn_down_shexp"}, {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
    {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"}, {"mlp.shared_experts.up_proj", "ffn_up_shexp"},
    {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
    // Gated DeltaNet (export/gguf_delta_net.h): Qwen3-Next's in_proj_qkvz names its attn_qkv part
    {"linear_attn.in_proj_qkvz", "attn_qkv"}, {"linear_attn.in_proj_qkv", "attn_qkv"},
    {"linear_attn.in_proj_z", "attn_gate"}, {"linear_attn.in_proj_ba", "ssm_ba"}, {"linear_attn.in_proj_b", "ssm_beta"},
    {"linear_attn.in_proj_a", "ssm_alpha"}, {"linear_attn.conv1d", "ssm_conv1d"}, {"linear_attn.norm", "ssm_norm"},
    {"linear_attn.out_proj", "ssm_out"},
};
constexpr LayerModule kLayerTensors[] = {{"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
                                         {"linear_attn.A_log", "ssm_a"},
                                         {"linear_attn.dt_bias", "ssm_dt.bias"}};

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

[[noreturn]] void unknown(const std::string& hf_name, const std::string& why) {
  fail(ErrorKind::InvalidInput, "GGUF export: tensor '" + hf_name + "' " + why);
}

// llama.cpp's name of an in-layer tensor ("self_attn.q_proj.weight" -> "attn_q.weight"); empty when none.
std::string in_layer_name(const std::string& rest, const GgufArch& g) {
  for (const auto& r : g.renames)
    if (rest == r.hf) return r.gguf;
  for (const auto& t : kLayerTensors)
    if (rest == t.hf) return t.gguf;
  const size_t dot = rest.rfind('.');
  if (dot == std::string::npos) return {};
  const std::string module = rest.substr(0, dot), kind = rest.substr(dot + 1);
  if (kind != "weight" && kind != "bias") return {};
  for (const auto& m : kLayerModules)
    if (module == m.hf) return std::string(m.gguf) + "." + kind;
  return {};
}

// "model.layers.N.<tensor>" -> "blk.N.<llama.cpp name>"; *expert gets an expert Linear's index (its rows,
// or its bias, are part e of the stacked ffn_*_exps tensor), else -1. Only the tensors of the layer's table
// (model/block_tensors.h) are named.
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
  const std::string rest = hf_name.substr(q + 1), blk = "blk." + std::to_string(layer) + ".";
  const size_t dot = rest.rfind('.');
  if (const char* exps = expert_module(rest.substr(0, dot == std::string::npos ? 0 : dot), expert)) {
    const std::string kind = rest.substr(dot + 1);  // gpt-oss's experts carry biases: stacked as their weights
    if (!cfg.is_moe_layer(layer) || *expert >= cfg.moe.num_experts || (kind != "weight" && (kind != "bias" || !cfg.moe.gpt_oss)))
      unknown(hf_name, "is not an expert weight of this model");
    return blk + exps + "." + kind;
  }
  bool listed = false;
  for (const BlockTensor& t : block_tensors(cfg, layer, false)) listed |= t.name == rest || t.stored == hf_name;
  if (!listed) unknown(hf_name, "is not a tensor of layer " + std::to_string(layer) + " of this " + cfg.architecture);
  const std::string name = in_layer_name(rest, arch_of(cfg));
  if (name.empty()) unknown(hf_name, "has no llama.cpp name");
  return blk + name;
}
}  // namespace

std::string gguf_architecture(const ModelConfig& cfg) { return arch_of(cfg).name; }

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
  if (arch_of(cfg).v_heads_tiled) return gguf_delta_row_order(hf_name, cfg);
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

std::vector<GgufRowPart> gguf_tensor_parts(const std::string& hf_name, const ModelConfig& cfg) {
  return gguf_delta_parts(hf_name, gguf_tensor_name(hf_name, cfg), cfg);
}

std::vector<int64_t> gguf_tensor_col_order(const std::string& hf_name, const ModelConfig& cfg) {
  return arch_of(cfg).v_heads_tiled ? gguf_delta_col_order(hf_name, cfg) : std::vector<int64_t>{};
}

void gguf_tensor_values(const std::string& hf_name, float* v, int64_t n) { gguf_delta_values(hf_name, v, n); }
void gguf_tensor_values_back(const std::string& hf_name, float* v, int64_t n) { gguf_delta_values_back(hf_name, v, n); }

std::vector<GgufExtraTensor> gguf_extra_tensors(const ModelConfig& cfg) {
  const RopeScaling& rs = cfg.rope_scaling;
  const GgufArch& g = arch_of(cfg);
  if (rs.type == "default" || (rs.type == "yarn" && g.yarn) || (rs.type == "linear" && g.linear_rope))
    return {};  // yarn, linear: the family's keys
  if (rs.type != "llama3" || !g.permute_qk)
    fail(ErrorKind::Unsupported, "GGUF export: rope scaling '" + rs.type + "' on " + cfg.architecture +
                                     " is not supported (llama3 scaling on the llama architecture, yarn on deepseek2)");
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

namespace {
// The keys every family writes, then the family's own (GgufArch::write_keys adds or replaces).
std::vector<GgufKey> gguf_model_keys(const ModelConfig& cfg) {
  std::vector<GgufKey> k;
  set_gguf_count(k, "context_length", cfg.max_position_embeddings);
  set_gguf_count(k, "embedding_length", cfg.hidden_size);
  set_gguf_count(k, "block_count", cfg.num_layers);  // MTP layers are not written
  set_gguf_count(k, "feed_forward_length", cfg.intermediate_size);
  set_gguf_count(k, "attention.head_count", cfg.num_heads);
  set_gguf_count(k, "attention.head_count_kv", cfg.num_kv_heads);
  // llama.cpp takes the head size from key_length, else embedding_length / head_count; Qwen3 has
  // head_dim != hidden / heads, so it is always written.
  set_gguf_count(k, "attention.key_length", cfg.head_dim);
  set_gguf_count(k, "attention.value_length", cfg.head_dim);
  set_gguf_key(k, "rope.freq_base", float(cfg.rope_theta));
  set_gguf_key(k, "attention.layer_norm_rms_epsilon", float(cfg.rms_norm_eps));
  set_gguf_count(k, "rope.dimension_count", cfg.head_dim);  // rope over the whole head
  set_gguf_count(k, "vocab_size", cfg.vocab_size);
  if (cfg.is_moe()) {
    set_gguf_count(k, "expert_count", cfg.moe.num_experts);
    set_gguf_count(k, "expert_used_count", cfg.moe.top_k);
  }
  const GgufArch& g = arch_of(cfg);
  if (g.write_keys) g.write_keys(cfg, k);
  return k;
}
}  // namespace

void add_gguf_model_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& model_dir, uint32_t file_type,
                             const std::string& name) {
  const std::string arch = gguf_architecture(cfg);
  gguf_extra_tensors(cfg);  // refuses rope scaling llama.cpp would not run, before anything is written
  const std::vector<GgufKey> keys = gguf_model_keys(cfg);
  w.add_string("general.architecture", arch);
  w.add_string("general.name", name);
  w.add_u32("general.file_type", file_type);
  w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION of today's k-quant layouts
  if (!w.has_key("general.alignment")) w.add_u32("general.alignment", w.alignment());
  for (const GgufKey& k : keys) {
    const std::string key = arch + "." + k.key;
    if (auto* u = std::get_if<uint32_t>(&k.value)) w.add_u32(key, *u);
    else if (auto* f = std::get_if<float>(&k.value)) w.add_f32(key, *f);
    else if (auto* b = std::get_if<bool>(&k.value)) w.add_bool(key, *b);
    else if (auto* a = std::get_if<std::vector<bool>>(&k.value)) w.add_bool_array(key, *a);
    else if (auto* n = std::get_if<std::vector<int32_t>>(&k.value)) w.add_array(key, *n);
    else w.add_string(key, std::get<std::string>(k.value));
  }
  add_gguf_vocab(w, read_gguf_vocab(model_dir, cfg.vocab_size));
}

// MLA's kv_b_proj [H * (nope + v), kv_lora]: head h's rows h * (nope + v) + [0, nope) are its keys, the
// next v its values.
MlaKvB mla_kv_b_dims(const ModelConfig& cfg) {
  return {cfg.num_heads, cfg.mla.qk_nope_head_dim, cfg.mla.v_head_dim, cfg.mla.kv_lora_rank};
}

bool is_mla_kv_b(const std::string& hf_name) {
  const std::string s = ".self_attn.kv_b_proj.weight";
  return hf_name.size() > s.size() && hf_name.compare(hf_name.size() - s.size(), s.size(), s) == 0;
}

std::string gguf_mla_k_b_name(const std::string& hf_name, const ModelConfig& cfg) {
  std::string v = gguf_tensor_name(hf_name, cfg);
  return v.replace(v.size() - std::string("attn_v_b.weight").size(), 8, "attn_k_b");
}

std::vector<int64_t> mla_v_b_rows(const MlaKvB& d) {
  std::vector<int64_t> rows;
  for (int64_t h = 0; h < d.heads; ++h)
    for (int64_t j = 0; j < d.v; ++j) rows.push_back(h * (d.nope + d.v) + d.nope + j);
  return rows;
}

void mla_k_b_from_kv_b(const MlaKvB& d, const float* kv_b, float* k_b) {
  for (int64_t h = 0; h < d.heads; ++h)
    for (int64_t r = 0; r < d.kv_lora; ++r)
      for (int64_t i = 0; i < d.nope; ++i) k_b[(h * d.kv_lora + r) * d.nope + i] = kv_b[(h * (d.nope + d.v) + i) * d.kv_lora + r];
}

void mla_kv_b_from_parts(const MlaKvB& d, const float* k_b, const float* v_b, float* kv_b) {
  for (int64_t h = 0; h < d.heads; ++h) {
    for (int64_t r = 0; r < d.kv_lora; ++r)
      for (int64_t i = 0; i < d.nope; ++i) kv_b[(h * (d.nope + d.v) + i) * d.kv_lora + r] = k_b[(h * d.kv_lora + r) * d.nope + i];
    for (int64_t j = 0; j < d.v; ++j)
      std::copy_n(v_b + (h * d.v + j) * d.kv_lora, d.kv_lora, kv_b + (h * (d.nope + d.v) + d.nope + j) * d.kv_lora);
  }
}

}  // namespace ar
