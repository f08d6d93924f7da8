// `--format gguf:<preset>`: the ggml type of every tensor of the file, as llama.cpp's llama-quantize
// picks it for a dense model (src/llama-quant.cpp, llama_tensor_get_type, as vendored in
// llama-cpp-python 0.3.36), with AutoRound's embedding and lm_head choices (autoround-spec.md §7):
//   main type        the preset's (q4_k for q4_k_s / q4_k_m ...); token_embd gets it too
//   output (lm_head) q6_k, except q8_0 for gguf:q8_0 and for rows that are not whole 256-blocks;
//                    a tied lm_head is token_embd itself, typed like the output
//   attn_v           q2_k: q3_k (q4_k when n_head / n_head_kv >= 4); q2_k_s: q4_k when that ratio >= 4;
//                    q3_k_m: q5_k for the first two layers, else q4_k; q3_k_l: q5_k;
//                    q4_k_m / q5_k_m: q6_k on use_more_bits layers; q4_k_s: q5_k for the first 4 layers
//   ffn_down         q2_k: q3_k; q2_k_s: q4_k in the first n/8 layers; q3_k_m: q5_k in the first n/16
//                    layers, else q4_k; q3_k_l: q5_k; q4_k_m / q5_k_m: q6_k on use_more_bits layers;
//                    q4_k_s: q5_k in the first n/8 layers
//   attn_output      q2_k: q3_k; q3_k_m: q4_k; q3_k_l: q5_k
//   use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
//   q2_k_mixed       AutoRound's recipe for dense models at --iters 0 (schemes.py
//                    _handle_special_schemes): every block Linear q4_k, token_embd and output q8_0,
//                    no per-layer bumps; written as a Q2_K_S file (file type and name), as AutoRound
//                    writes it. With tuning AutoRound falls back to q2_k_s on dense models; so does
//                    the pipeline (pipeline/quantize.cpp).
// A row length that is not a multiple of the type's block falls back as llama.cpp does: q2_k, q3_k ->
// q4_0; q4_k -> q5_0; q5_k -> q5_1; q6_k -> q8_0; and when that does not divide either, f16.
//   8 experts       (n_expert == 8, llama.cpp's Mixtral-8x7B rule) attn_v and attn_k q8_0; attn_output
//                    q5_k for q2_k, q3_k_s, q3_k_m, q4_k_s, q4_k_m (its dense rule is skipped)
//   experts          ffn_{gate,up,down}_exps and the shared expert follow ffn_gate / ffn_up / ffn_down
//                    (layer from the tensor's block); routers and shared_expert_gate stay f32
// Not modelled (llama.cpp's other cases): Falcon, the 70B attn_v bump,
// imatrix-dependent q4_0/q5_0 ffn_down changes, i-quants. 1-D tensors (norms, biases) stay f32.
#pragma once
#include <cstdint>
#include <string>

#include "quant/ggml_types.h"

namespace ar::quant {

// Other: a Linear llama.cpp's rules do not name (MLA's q_a / q_b / kv_a_mqa / k_b / v_b): the main type.
enum class GgufTensorKind { TokenEmbd, Output, AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown, Other };

struct GgufScheme {
  std::string preset;       // "q4_k_m"
  std::string file_tag;     // in the file's name, upper case: "Q4_K_M" (q2_k_mixed: "Q2_K_S")
  GgmlType main = GgmlType::Q4_K;
  uint32_t file_type = 15;  // llama_ftype, written as general.file_type
  // The type of a 2-D tensor of `kind` in layer `layer` of `n_layers` (ignored for token_embd and
  // output) whose rows hold `ncols` elements; n_gqa = n_head / n_head_kv.
  // n_expert: the model's expert count (0: dense); 8 turns on llama.cpp's Mixtral-8x7B rules.
  GgmlType type_of(GgufTensorKind kind, int64_t layer, int64_t n_layers, int64_t ncols, int64_t n_gqa,
                   int64_t n_expert = 0) const;
};

// "gguf:q4_k_m" (case-insensitive); InvalidInput naming the spec and the known presets otherwise.
GgufScheme parse_gguf_scheme(const std::string& spec);
// Whether a --format entry names a GGUF output ("gguf:...").
bool is_gguf_format(const std::string& format);
// The type llama.cpp falls back to when ncols is not a multiple of t's block (t itself when it is).
GgmlType gguf_shape_fallback(GgmlType t, int64_t ncols);

}  // namespace ar::quant
