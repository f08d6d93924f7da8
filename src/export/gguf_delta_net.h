// How llama.cpp holds a Gated DeltaNet layer (Qwen3-Next "qwen3next", Qwen3.5 "qwen35" / "qwen35moe"), as
// convert_hf_to_gguf.py writes it (conversion/qwen.py, llama-cpp-python 0.3.36's copy):
// - Qwen3-Next's in_proj_qkvz [Hk (2 Dk + 2 R Dv), C], per key head [q | k | v | z], becomes two tensors:
//   attn_qkv = every head's q, then every head's k, then every head's v (the conv's channel order), and
//   attn_gate = every head's z (R = Hv / Hk value heads per key head). Rows move whole, so a quantized
//   tensor's packed rows carry over byte for byte.
// - qwen35 / qwen35moe hold the value heads in tiled order (GgufArch::v_heads_tiled): file head
//   t = r Hk + k is checkpoint head k R + r, in the V rows of in_proj_qkv and the conv kernel, in
//   in_proj_z (rows of Dv), in_proj_b / in_proj_a / A_log / dt_bias (one row or element per head), and in
//   out_proj's columns (Dv per head). With Hk == Hv nothing moves.
// - A_log is written as ssm_a = -exp(A_log).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace ar {

// A GGUF tensor made of some rows of a checkpoint tensor: row i is the checkpoint's row rows[i].
struct GgufRowPart {
  std::string gguf_name;
  std::vector<int64_t> rows;
};

// in_proj_qkvz's two tensors, attn_qkv first (`qkv_name` names it); empty for every other tensor.
std::vector<GgufRowPart> gguf_delta_parts(const std::string& hf_name, const std::string& qkv_name,
                                          const ModelConfig& cfg);
// The tiled value-head order of a tensor's rows (elements of a 1-D one), for the architectures that hold
// them so (GgufArch::v_heads_tiled): row i of the file's is row order[i] of the checkpoint's; empty when
// nothing moves.
std::vector<int64_t> gguf_delta_row_order(const std::string& hf_name, const ModelConfig& cfg);
// The same for out_proj's columns: column j of the file's is column order[j] of the checkpoint's.
std::vector<int64_t> gguf_delta_col_order(const std::string& hf_name, const ModelConfig& cfg);
// ssm_a's values from A_log's (in place); other tensors unchanged. _back: A_log = log(-ssm_a) (NaN where
// ssm_a is not negative, which the reader refuses as a non-finite value).
void gguf_delta_values(const std::string& hf_name, float* v, int64_t n);
void gguf_delta_values_back(const std::string& hf_name, float* v, int64_t n);

}  // namespace ar
