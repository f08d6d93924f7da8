// Writes a random-weight HF model directory for a given config.json (tests, benchmarks, demos).
// Weights ~ N(0, 1/sqrt(fan_in)) (norm weights ~ 1 + N(0, 0.1)), seeded, in the requested dtype;
// optionally sharded into `shards` files with a model.safetensors.index.json. A mixture-of-experts
// config gets its experts one tensor per expert Linear, or with `fused_experts` transformers 5's
// stacked mlp.experts.gate_up_proj / down_proj (model/moe_names.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.h"

namespace ar {

void write_synthetic_model(const std::string& dir, const nlohmann::json& config, uint64_t seed,
                           DType dtype = DType::F32, int shards = 1, bool fused_experts = false);

// Writes a llama2.c-format tokenizer.bin: <unk>, BOS, EOS, the 256 byte tokens, then common
// English pairs with descending scores up to vocab_size (at least 259).
void write_byte_tokenizer(const std::string& path, int64_t vocab_size);

// A small Llama-style config (hidden 64, 2 layers, GQA) for tests and demos.
nlohmann::json tiny_llama_config(int64_t layers = 2);

// Its mixture-of-experts variants: "qwen3_moe" (8 experts of 32, top-2 renormalized, q/k norm, layer 0
// dense), "qwen2_moe" (8 experts, top-2, a shared expert of 64 with its gate, every layer MoE),
// "mixtral" (8 experts of 32, top-2), "deepseek_v3" (latent attention, YaRN, DeepSeek's grouped sigmoid
// router, a shared expert, layer 0 dense), "deepseek_v32" (deepseek_v3 with the sparse-attention
// indexer, index_topk 64), "glm4_moe" (biases, partial RoPE, the sigmoid router), "gpt_oss" (sinks,
// 16-key sliding windows on even layers, 8 biased experts of 32 with the clamped SwiGLU at 1.5).
nlohmann::json tiny_moe_config(const std::string& arch, int64_t layers = 2);
// Gemma 3 (sandwich norms, GeLU-tanh, windows of 16 on the even layers with their own RoPE, linear x2 on the
// odd ones, query_pre_attn_scalar 24, tied embeddings, logits soft-capped at 30) from tiny_llama_config.
nlohmann::json tiny_gemma3_config(int64_t layers = 2);
// Qwen3-Next (Gated DeltaNet on the even layers: 2 key heads, 4 value heads of 16, a 4-tap conv; gated full
// attention with partial RoPE on the odd ones; qwen2_moe's experts and gated shared expert, renormalized).
nlohmann::json tiny_qwen3_next_config(int64_t layers = 2);
// tiny_gemma3_config for "gemma3", tiny_qwen3_next_config for "qwen3_next" and, as Qwen3_5MoeForCausalLM
// (the split projections), for "qwen3_5_moe", tiny_moe_config's families otherwise.
nlohmann::json tiny_family_config(const std::string& arch, int64_t layers = 2);

}  // namespace ar
