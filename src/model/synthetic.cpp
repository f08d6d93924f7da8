#include "model/synthetic.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "core/error.h"
#include "core/tensor.h"
#include "io/atomic_file.h"
#include "model/block_tensors.h"
#include "model/loader.h"
#include "model/moe_names.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace ar {

void write_byte_tokenizer(const std::string& path, int64_t vocab_size) {
  if (vocab_size < 259) fail(ErrorKind::InvalidInput, "byte tokenizer needs vocab_size >= 259");
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.push_back(buf);
  }
  const char* letters = " etaoinshrdlucmfwypvbgkjqxz";
  for (size_t i = 0; letters[i] && int64_t(pieces.size()) < vocab_size; ++i)  // single characters first
    pieces.push_back(std::string(1, letters[i]));
  for (size_t i = 0; letters[i] && int64_t(pieces.size()) < vocab_size; ++i)
    for (size_t j = 1; letters[j] && int64_t(pieces.size()) < vocab_size; ++j)
      pieces.push_back(std::string(1, letters[i]) + letters[j]);
  std::string out(4, '\0');
  uint32_t max_len = 6;
  std::memcpy(out.data(), &max_len, 4);
  for (size_t i = 0; i < pieces.size(); ++i) {
    float score = i < 259 ? 0.f : -float(i);
    int32_t len = int32_t(pieces[i].size());
    out.append(reinterpret_cast<const char*>(&score), 4);
    out.append(reinterpret_cast<const char*>(&len), 4);
    out += pieces[i];
  }
  write_file_atomic(path, out);
}

nlohmann::json tiny_llama_config(int64_t layers) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", layers},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 300},
          {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

nlohmann::json tiny_gemma3_config(int64_t layers) {
  nlohmann::json c = tiny_llama_config(layers);
  c["architectures"] = {"Gemma3ForCausalLM"};
  c.erase("hidden_act");
  c.erase("rope_theta");
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["head_dim"] = 16;
  c["query_pre_attn_scalar"] = 24;
  c["sliding_window"] = 16;
  c["tie_word_embeddings"] = true;
  c["final_logit_softcapping"] = 30.0;
  for (int64_t l = 0; l < layers; ++l) c["layer_types"].push_back(l % 2 ? "full_attention" : "sliding_attention");
  c["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                          {"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}}}};
  return c;
}

nlohmann::json tiny_qwen3_next_config(int64_t layers) {
  nlohmann::json c = tiny_moe_config("qwen2_moe", layers);
  c["architectures"] = {"Qwen3NextForCausalLM"};
  c.erase("rope_theta");
  c["head_dim"] = 16;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}};
  c["norm_topk_prob"] = true;
  c["linear_num_key_heads"] = 2;
  c["linear_num_value_heads"] = 4;
  c["linear_key_head_dim"] = 16;
  c["linear_value_head_dim"] = 16;
  c["linear_conv_kernel_dim"] = 4;
  for (int64_t l = 0; l < layers; ++l) c["layer_types"].push_back(l % 2 ? "full_attention" : "linear_attention");
  return c;
}

nlohmann::json tiny_family_config(const std::string& arch, int64_t layers) {
  if (arch == "qwen3_next") return tiny_qwen3_next_config(layers);
  if (arch == "qwen3_5_moe") {  // Qwen3-Next's sizes, the split projections, every layer MoE
    nlohmann::json c = tiny_qwen3_next_config(layers);
    c["architectures"] = {"Qwen3_5MoeForCausalLM"};
    c.erase("mlp_only_layers");
    c.erase("decoder_sparse_step");
    c.erase("norm_topk_prob");
    return c;
  }
  return arch == "gemma3" ? tiny_gemma3_config(layers) : tiny_moe_config(arch, layers);
}

namespace {
// DeepSeek-V3 (latent attention with q_lora, YaRN, 8 experts in 4 groups, a shared expert, layer 0 dense)
// or GLM-4.5 (q/k/v biases, partial RoPE, 8 experts in one group, a shared expert, layer 0 dense).
nlohmann::json tiny_sigmoid_moe_config(nlohmann::json c, const std::string& arch) {
  c.erase("num_experts");
  c["n_routed_experts"] = 8;
  c["moe_intermediate_size"] = 32;
  c["n_shared_experts"] = 1;
  c["first_k_dense_replace"] = 1;
  c["norm_topk_prob"] = true;
  if (arch == "glm4_moe") {
    c["architectures"] = {"Glm4MoeForCausalLM"};
    c["attention_bias"] = true;
    c["head_dim"] = 16;
    c["partial_rotary_factor"] = 0.5;
    c["n_group"] = 1;
    c["topk_group"] = 1;
    c["routed_scaling_factor"] = 1.0;
    return c;
  }
  c["architectures"] = {"DeepseekV3ForCausalLM"};
  c["num_key_value_heads"] = c["num_attention_heads"];
  c["q_lora_rank"] = 64;
  c["kv_lora_rank"] = 32;
  c["qk_nope_head_dim"] = 16;
  c["qk_rope_head_dim"] = 32;
  c["v_head_dim"] = 16;
  c["n_group"] = 4;
  c["topk_group"] = 2;
  c["routed_scaling_factor"] = 2.5;
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                       {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  if (arch == "deepseek_v32") {  // V3 plus the sparse-attention indexer, dense up to 64 tokens
    c["architectures"] = {"DeepseekV32ForCausalLM"};
    c["index_n_heads"] = 4;
    c["index_head_dim"] = 16;
    c["index_topk"] = 64;
  }
  return c;
}
}  // namespace

nlohmann::json tiny_moe_config(const std::string& arch, int64_t layers) {
  nlohmann::json c = tiny_llama_config(layers);
  c["num_experts_per_tok"] = 2;
  if (arch == "mixtral") {
    c["architectures"] = {"MixtralForCausalLM"};
    c["num_local_experts"] = 8;
    c["intermediate_size"] = 32;  // Mixtral's experts are intermediate_size wide
    return c;
  }
  if (arch == "gpt_oss") {  // sinks, 16-key windows on layers 0, 2, ..., biased experts, a clamp at 1.5
    c["architectures"] = {"GptOssForCausalLM"};
    c["num_local_experts"] = 8;
    c["intermediate_size"] = 32;  // gpt-oss's experts are intermediate_size wide
    c["head_dim"] = 16;
    c["sliding_window"] = 16;
    c["swiglu_limit"] = 1.5;
    return c;
  }
  c["num_experts"] = 8;
  c["moe_intermediate_size"] = 32;
  c["decoder_sparse_step"] = 1;
  if (arch == "qwen2_moe") {
    c["architectures"] = {"Qwen2MoeForCausalLM"};
    c["shared_expert_intermediate_size"] = 64;
    c["norm_topk_prob"] = false;
    c["mlp_only_layers"] = nlohmann::json::array();
    return c;
  }
  if (arch == "deepseek_v3" || arch == "deepseek_v32" || arch == "glm4_moe") return tiny_sigmoid_moe_config(c, arch);
  c["architectures"] = {"Qwen3MoeForCausalLM"};
  c["head_dim"] = 16;
  c["norm_topk_prob"] = true;
  c["mlp_only_layers"] = {0};  // a dense first layer
  return c;
}

namespace {
// A MoE layer's router, experts (one tensor per expert Linear, or transformers 5's fused tensors) and
// shared expert (model/moe_names.h).
template <class Make>
void make_moe(const ModelConfig& c, int64_t l, bool fused, Make& make) {
  const int64_t C = c.hidden_size, E = c.moe.num_experts, I = c.moe.expert_intermediate, Is = c.moe.shared_intermediate;
  make(router_weight_name(c, l, fused), {E, C}, false);
  if (fused) {
    make(fused_experts_name(l, ExpertProj::Gate), {E, 2 * I, C}, false);
    make(fused_experts_name(l, ExpertProj::Down), {E, C, I}, false);
  } else {
    for (int64_t e = 0; e < E; ++e) {
      make(expert_weight_name(c, l, e, ExpertProj::Gate), {I, C}, false);
      make(expert_weight_name(c, l, e, ExpertProj::Up), {I, C}, false);
      make(expert_weight_name(c, l, e, ExpertProj::Down), {C, I}, false);
    }
  }
  if (!Is) return;
  make(shared_expert_name(l, ExpertProj::Gate), {Is, C}, false);
  make(shared_expert_name(l, ExpertProj::Up), {Is, C}, false);
  make(shared_expert_name(l, ExpertProj::Down), {C, Is}, false);
  make(shared_gate_name(l), {1, C}, false);
}


// A layer from its tensor table (model/block_tensors.h), in table order, a fused expert tensor once: the
// families added with the table (latent attention, the sigmoid router, partial RoPE). The seven older
// families keep the historical order above, which the demo's and earlier issues' figures were measured on.
template <class Make>
void make_from_table(const ModelConfig& c, int64_t l, bool fused, Make& make) {
  const std::string p = HfModel::layer_prefix(l);
  std::set<std::string> done;
  for (const BlockTensor& t : block_tensors(c, l, fused && c.is_moe_layer(l))) {
    const std::string name = t.stored.empty() ? p + t.name : t.stored;
    if (!done.insert(name).second) continue;
    make(name, t.offset >= 0 ? t.stored_shape : t.shape, t.role == TensorRole::Norm, t.unit_offset);
  }
}
bool tabled_family(const ModelConfig& c) {
  return c.is_mla() || c.moe.routing != Routing::SoftmaxTopK || c.rotary_dims || c.sandwich_norms ||
         !c.delta_layers.empty() || c.attn_out_gate;
}
}  // namespace

void write_synthetic_model(const std::string& dir, const nlohmann::json& config, uint64_t seed, DType dtype,
                           int shards, bool fused_experts) {
  ModelConfig c = parse_model_config(config, dir + "/config.json");
  Context ctx(Device{}, 1);
  std::mt19937_64 rng(seed);
  std::vector<StEntry> all;
  auto make = [&](const std::string& name, Shape shape, bool norm, bool offset = true) {
    Tensor t = Tensor::empty(shape, DType::F32, ctx);
    double sd = norm ? 0.1 : 1.0 / std::sqrt(double(shape.back()));
    std::normal_distribution<double> nd(0.0, sd);
    const double mean = norm && !(c.norm_unit_offset && offset) ? 1.0 : 0.0;  // Gemma applies its norms as 1 + w
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(mean + nd(rng));
    all.push_back({name, dtype == DType::F32 ? t : t.to(dtype, ctx)});
  };
  const int64_t C = c.hidden_size, I = c.intermediate_size, QD = c.num_heads * c.head_dim,
                KD = c.num_kv_heads * c.head_dim, V = c.vocab_size;
  make("model.embed_tokens.weight", {V, C}, false);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (tabled_family(c)) {
      make_from_table(c, l, fused_experts, make);
      continue;
    }
    std::string p = "model.layers." + std::to_string(l) + ".";
    make(p + "input_layernorm.weight", {C}, true);
    make(p + "self_attn.q_proj.weight", {QD, C}, false);
    make(p + "self_attn.k_proj.weight", {KD, C}, false);
    make(p + "self_attn.v_proj.weight", {KD, C}, false);
    make(p + "self_attn.o_proj.weight", {C, QD}, false);
    if (c.qkv_bias) {
      make(p + "self_attn.q_proj.bias", {QD}, false);
      make(p + "self_attn.k_proj.bias", {KD}, false);
      make(p + "self_attn.v_proj.bias", {KD}, false);
    }
    if (c.o_bias) make(p + "self_attn.o_proj.bias", {C}, false);
    if (c.qk_norm) {
      make(p + "self_attn.q_norm.weight", {c.head_dim}, true);
      make(p + "self_attn.k_norm.weight", {c.head_dim}, true);
    }
    make(p + "post_attention_layernorm.weight", {C}, true);
    if (c.is_moe_layer(l)) {
      make_moe(c, l, fused_experts, make);
      continue;
    }
    make(p + "mlp.gate_proj.weight", {I, C}, false);
    make(p + "mlp.up_proj.weight", {I, C}, false);
    make(p + "mlp.down_proj.weight", {C, I}, false);
  }
  make("model.norm.weight", {C}, true);
  if (!c.tie_word_embeddings) make("lm_head.weight", {V, C}, false);

  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/config.json", config.dump(2) + "\n");
  write_byte_tokenizer(dir + "/tokenizer.bin", c.vocab_size);
  if (shards <= 1) {
    write_safetensors(dir + "/model.safetensors", all);
    return;
  }
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<StEntry> part;
    for (size_t i = size_t(s); i < all.size(); i += size_t(shards)) {
      part.push_back(all[i]);
      index["weight_map"][all[i].name] = name;
    }
    write_safetensors(dir + "/" + name, part);
  }
  write_file_atomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace ar
