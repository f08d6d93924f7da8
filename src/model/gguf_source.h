// GGUF models read back (issue 13, "Reading back"): `eval`, `generate` and `logits` take a GGUF file
// for --model, dequantized to fp32 on load, so the quality tools work on what `--format gguf:<preset>`
// writes (and on llama.cpp's own files of the same architectures).
//
// What is read:
// - Architectures: the families whose GGUF row (model/arch/gguf_arch.h) reads back: "llama" (Llama;
//   Mixtral with expert_count; Mistral is written as llama too), "qwen2", "qwen3", "qwen2moe", "qwen3moe",
//   "deepseek2" (DeepSeek-V3, the split attn_k_b / attn_v_b layout, joined back into kv_b_proj),
//   "glm4moe". Others are refused (Unsupported); so are MTP layers (nextn_predict_layers > 0).
// - The configuration is built from the architecture's keys, as llama.cpp reads them:
//   {arch}.embedding_length, block_count, feed_forward_length, attention.head_count, context_length and
//   attention.layer_norm_rms_epsilon (required, as llama.cpp requires them), attention.head_count_kv
//   (default head_count), attention.key_length (default embedding_length / head_count; value_length and
//   rope.dimension_count must equal it, unless the family's read_keys reads them: MLA, partial RoPE),
//   rope.freq_base (default 10000), the family's own keys (experts, MLA, YaRN); float keys are taken at the
//   shortest decimal of their f32 (1e-5, not 9.99999974e-6), as config.json spells them. vocab_size:
//   the tokenizer.ggml.tokens count, else {arch}.vocab_size, else token_embd's rows; bos/eos from
//   tokenizer.ggml.bos/eos_token_id. Every tokenizer.ggml.*_token_id must be inside the vocabulary
//   (GgufFile::token_id; -1 / 0xFFFFFFFF mean none), and a metadata key given twice is refused.
//   Then the flags from the tensors: tie_word_embeddings when output.weight is absent, q/k/v bias when
//   blk.0.attn_q.bias exists, o bias when blk.0.attn_output.bias does, q/k norm when blk.0.attn_q_norm
//   exists (always for qwen3). The result goes through parse_model_config (ranges, limits, divisibility).
// - Refused with Unsupported: rope scaling ({arch}.rope.scaling.type other than none, except YaRN for
//   deepseek2, or a rope_freqs.weight tensor: llama3 scaling would need the per-frequency factors),
//   and any tensor the model does not read (it would carry semantics we do not run).
// - Tensors: each HF tensor the computation reads is found under its llama.cpp name
//   (gguf_tensor_name) and checked when the file is opened: present once, a ggml type we decode
//   (ggml_type_known), ggml dims [ne0 = row length, ne1 = rows] equal to the config's shape (trailing 1s
//   allowed), the row length a multiple of the type's block, and its bytes inside the data section at
//   an aligned offset, sharing no byte with another tensor (the safetensors overlap rule). Errors name the file and the GGUF tensor. Loading dequantizes one tensor from
//   the mapping (bit-exact ggml_dequantize), undoes the llama architecture's Q/K row permutation
//   (inverse of gguf_tensor_row_order, for weights and biases), releases the mapped pages and checks
//   that every value is finite (non-finite values are found on load, not at open: finding them at open
//   would mean dequantizing the whole model twice).
// - The tokenizer: the GGUF vocabulary (HfBpeTokenizer::from_gguf through load_tokenizer).
#pragma once
#include <memory>
#include <string>

#include "model/loader.h"

namespace ar {

// The model of a GGUF file, checked as described above; InvalidInput/Unsupported naming the file.
std::unique_ptr<HfModel> open_gguf_model(const std::string& path);

// A GGUF file (open_gguf_model) or an HF model directory (HfModel::open).
std::unique_ptr<HfModel> open_model(const std::string& path);

}  // namespace ar
