// What llama.cpp expects of a model in a GGUF file, beyond the tensor bytes: its architecture name
// and hyperparameter keys (the family's row, model/arch/gguf_arch.h), llama.cpp's tensor names, the Q/K
// row order of the "llama" architecture, MLA's kv_b_proj split, extra tensors (rope_freqs for llama3 rope
// scaling) and the tokenizer (gguf_tokenizer.h). Mirrors what llama.cpp's convert_hf_to_gguf.py writes for
// LlamaForCausalLM, MistralForCausalLM (both "llama"), Qwen2ForCausalLM ("qwen2"), Qwen3ForCausalLM
// ("qwen3"), and the mixture-of-experts families, whose experts are stacked per layer into
// ffn_{gate,up,down}_exps [E, rows, cols]: MixtralForCausalLM ("llama" with experts), Qwen2MoeForCausalLM
// ("qwen2moe"), Qwen3MoeForCausalLM ("qwen3moe"), DeepseekV3ForCausalLM ("deepseek2", Kimi K2 too) and
// Glm4MoeForCausalLM ("glm4moe"), gpt-oss, Gemma 3, and the Gated DeltaNet families Qwen3NextForCausalLM
// ("qwen3next") and Qwen3.5 ("qwen35", "qwen35moe"; their layout: gguf_delta_net.h). MTP layers are not
// written (llama.cpp's converter drops DeepSeek's; the others' would have to be written whole, and
// llama.cpp's perplexity and generation do not run them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "export/gguf_delta_net.h"
#include "model/config.h"

namespace ar {

class GgufWriter;

// llama.cpp architecture of a model: "llama" (Llama, Mistral, Mixtral), "qwen2", "qwen3", "qwen2moe",
// "qwen3moe", "deepseek2", "glm4moe"; Unsupported otherwise, and for configs llama.cpp's graph does not
// run (dense layers in a qwen*moe, norm_topk_prob other than its fixed choice, the family's own checks).
std::string gguf_architecture(const ModelConfig& cfg);

// llama.cpp name of an HF tensor (model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight).
// Names the layer's table (model/block_tensors.h) does not hold (a layer past num_layers, q_norm without
// qk_norm, ...) and unknown names fail with the name. MLA's kv_b_proj names its attn_v_b part. An expert's Linear (model.layers.3.mlp.experts.5.gate_proj.weight,
// Mixtral's w1/w3/w2 or gate/up/down_proj) maps to its layer's stacked tensor (blk.3.ffn_gate_exps.weight)
// and *expert gets its index (-1 for every other tensor).
std::string gguf_tensor_name(const std::string& hf_name, const ModelConfig& cfg, int64_t* expert = nullptr);

// convert_hf_to_gguf's Q/K permutation of the llama architecture, as row indices: row i of the GGUF
// tensor is row order[i] of the HF tensor. HF rotates pairs (i, i + D/2) of each head of D rows;
// llama.cpp's normal (non-NEOX) rope rotates adjacent pairs (2i, 2i + 1), so per head GGUF row 2i
// takes HF row i and row 2i + 1 takes HF row i + D/2. Works on any packed row format (rows move whole).
std::vector<int64_t> gguf_qk_row_order(int64_t rows, int64_t n_head);

// The row order an HF tensor needs in GGUF: the permutation above for q_proj/k_proj weights and
// biases of the "llama" architecture (k_proj over the KV heads), qwen35's tiled value heads
// (gguf_delta_net.h); empty when rows stay in place (every other tensor, and qwen2/qwen3, whose NEOX rope
// in llama.cpp matches HF's layout).
std::vector<int64_t> gguf_tensor_row_order(const std::string& hf_name, const ModelConfig& cfg);

// A checkpoint tensor llama.cpp holds as several tensors of its rows (Qwen3-Next's in_proj_qkvz: attn_qkv,
// attn_gate; export/gguf_delta_net.h), the first under gguf_tensor_name's name; empty for the others.
std::vector<GgufRowPart> gguf_tensor_parts(const std::string& hf_name, const ModelConfig& cfg);
// The column order of a 2-D tensor in GGUF (qwen35's out_proj): column j of the file's is column order[j]
// of the checkpoint's; empty when columns stay in place. Rows of a quantized type do not carry over a
// column move: the tensor is quantized in the file's order.
std::vector<int64_t> gguf_tensor_col_order(const std::string& hf_name, const ModelConfig& cfg);
// A float tensor's values as llama.cpp holds them (ssm_a = -exp(A_log)), in place.
void gguf_tensor_values(const std::string& hf_name, float* v, int64_t n);
void gguf_tensor_values_back(const std::string& hf_name, float* v, int64_t n);  // the checkpoint's values

// Tensors llama.cpp needs that the HF checkpoint does not hold, all F32 with ggml dims.
struct GgufExtraTensor {
  std::string name;
  std::vector<uint64_t> dims;
  std::vector<float> data;
};
// llama3 rope scaling: "rope_freqs.weight" [head_dim / 2], the per-frequency divisors llama.cpp
// applies (what convert_hf_to_gguf computes). Empty without rope scaling.
std::vector<GgufExtraTensor> gguf_extra_tensors(const ModelConfig& cfg);

// MLA's kv_b_proj [H * (nope + v), kv_lora] as llama.cpp's deepseek2 holds it (convert_hf_to_gguf's
// DeepseekV2Model): attn_k_b [H][kv_lora][nope], each head's key rows transposed, and attn_v_b
// [H][v][kv_lora], each head's value rows as they are.
struct MlaKvB {
  int64_t heads, nope, v, kv_lora;
};
MlaKvB mla_kv_b_dims(const ModelConfig& cfg);
bool is_mla_kv_b(const std::string& hf_name);  // "model.layers.N.self_attn.kv_b_proj.weight"
std::string gguf_mla_k_b_name(const std::string& hf_name, const ModelConfig& cfg);  // blk.N.attn_k_b.weight
std::vector<int64_t> mla_v_b_rows(const MlaKvB& d);  // kv_b's rows that attn_v_b holds, in its order
void mla_k_b_from_kv_b(const MlaKvB& d, const float* kv_b, float* k_b);
void mla_kv_b_from_parts(const MlaKvB& d, const float* k_b, const float* v_b, float* kv_b);

// general.* (architecture, name, file_type, quantization_version = 2, alignment), the architecture's
// hyperparameters and the full tokenizer of `model_dir` (gguf_tokenizer.h). `file_type` is llama.cpp's
// LlamaFileType (e.g. 15 = MOSTLY_Q4_K_M).
void add_gguf_model_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& model_dir, uint32_t file_type,
                             const std::string& name);

}  // namespace ar
