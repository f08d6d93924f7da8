// What llama.cpp expects of a model in a GGUF file, beyond the tensor bytes: its architecture name
// and hyperparameter keys, llama.cpp's tensor names, the Q/K row order of the "llama" architecture,
// extra tensors (rope_freqs for llama3 rope scaling) and the tokenizer (gguf_tokenizer.h). Mirrors what
// llama.cpp's convert_hf_to_gguf.py writes for LlamaForCausalLM, MistralForCausalLM (both "llama"),
// Qwen2ForCausalLM ("qwen2") and Qwen3ForCausalLM ("qwen3"), and the mixture-of-experts families:
// MixtralForCausalLM ("llama" with experts), Qwen2MoeForCausalLM ("qwen2moe"), Qwen3MoeForCausalLM
// ("qwen3moe"), whose experts are stacked per layer into ffn_{gate,up,down}_exps [E, rows, cols].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace ar {

class GgufWriter;

// llama.cpp architecture of a model: "llama" (Llama, Mistral, Mixtral), "qwen2", "qwen3", "qwen2moe",
// "qwen3moe"; Unsupported otherwise, and for MoE configs llama.cpp's graph does not run (dense layers
// in a qwen*moe, norm_topk_prob other than its fixed choice).
std::string gguf_architecture(const ModelConfig& cfg);

// llama.cpp name of an HF tensor (model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight).
// Names the architecture does not have (a layer past num_layers, q_norm without qk_norm, ...) and
// unknown names fail with the name. An expert's Linear (model.layers.3.mlp.experts.5.gate_proj.weight,
// Mixtral's w1/w3/w2 or gate/up/down_proj) maps to its layer's stacked tensor (blk.3.ffn_gate_exps.weight)
// and *expert gets its index (-1 for every other tensor).
std::string gguf_tensor_name(const std::string& hf_name, const ModelConfig& cfg, int64_t* expert = nullptr);

// convert_hf_to_gguf's Q/K permutation of the llama architecture, as row indices: row i of the GGUF
// tensor is row order[i] of the HF tensor. HF rotates pairs (i, i + D/2) of each head of D rows;
// llama.cpp's normal (non-NEOX) rope rotates adjacent pairs (2i, 2i + 1), so per head GGUF row 2i
// takes HF row i and row 2i + 1 takes HF row i + D/2. Works on any packed row format (rows move whole).
std::vector<int64_t> gguf_qk_row_order(int64_t rows, int64_t n_head);

// The row order an HF tensor needs in GGUF: the permutation above for q_proj/k_proj weights and
// biases of the "llama" architecture (k_proj over the KV heads); empty when rows stay in place
// (every other tensor, and qwen2/qwen3, whose NEOX rope in llama.cpp matches HF's layout).
std::vector<int64_t> gguf_tensor_row_order(const std::string& hf_name, const ModelConfig& cfg);

// Tensors llama.cpp needs that the HF checkpoint does not hold, all F32 with ggml dims.
struct GgufExtraTensor {
  std::string name;
  std::vector<uint64_t> dims;
  std::vector<float> data;
};
// llama3 rope scaling: "rope_freqs.weight" [head_dim / 2], the per-frequency divisors llama.cpp
// applies (what convert_hf_to_gguf computes). Empty without rope scaling.
std::vector<GgufExtraTensor> gguf_extra_tensors(const ModelConfig& cfg);

// general.* (architecture, name, file_type, quantization_version = 2, alignment), the architecture's
// hyperparameters and the full tokenizer of `model_dir` (gguf_tokenizer.h). `file_type` is llama.cpp's
// LlamaFileType (e.g. 15 = MOSTLY_Q4_K_M).
void add_gguf_model_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& model_dir, uint32_t file_type,
                             const std::string& name);

}  // namespace ar
