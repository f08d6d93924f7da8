// ggml's k-quants q2_k, q3_k, q4_k, q5_k, q6_k: 256-element super-blocks with double-quantized
// scales (ggml-common.h block_q*_K). Decoding bit-exact with ggml and gguf-py, packing from
// parameters decided elsewhere (AutoRound's tuned d, sub-scales, mins and codes), and unpacking.
//
// A super-block is cut into groups (16 of 16 elements, or 8 of 32 for q4_k/q5_k); element e belongs
// to group e / group_size. Group j decodes, in fp32 and in this order (as ggml):
//   asym (q2_k, q4_k, q5_k): w = (d * sc[j]) * q - dmin * mn[j]
//   sym  (q3_k, q6_k):       w = (d * sc[j]) * q
//
// | type | groups x size | sc          | mn    | q        | block bytes                                  |
// |------|---------------|-------------|-------|----------|----------------------------------------------|
// | q2_k | 16 x 16       | 0..15       | 0..15 | 0..3     | scales[16] (sc | mn<<4), qs[64], d, dmin = 84 |
// | q3_k | 16 x 16       | -32..31     | -     | -4..3    | hmask[32], qs[64], scales[12], d = 110       |
// | q4_k | 8 x 32        | 0..63       | 0..63 | 0..15    | d, dmin, scales[12], qs[128] = 144           |
// | q5_k | 8 x 32        | 0..63       | 0..63 | 0..31    | d, dmin, scales[12], qh[32], qs[128] = 176   |
// | q6_k | 16 x 16       | -128..127   | -     | -32..31  | ql[128], qh[64], scales[16] int8, d = 210    |
// q3_k stores sc + 32 in 6 bits and q + 4 in 3 bits; q6_k stores q + 32 in 6 bits. The bit positions
// of each field are documented next to the code that reads and writes them (ggml_kquants.cpp).
#pragma once
#include <array>
#include <cstdint>

#include "quant/ggml_types.h"

namespace ar::quant {

// The parameters of one 256-element super-block. Only the first `groups` entries of sc and mn are
// used (8 for q4_k/q5_k, 16 otherwise) and mn only by the asymmetric types; unused entries are
// ignored by pack and returned as 0 by unpack. d and dmin are written as fp16 (round to nearest
// even): pass values already on the fp16 grid, as AutoRound's double quantization produces them, and
// they are written exactly. pack(unpack(b)) == b for every block whose d and dmin are not NaN.
struct KQuantBlockParams {
  float d = 0.0f;            // super-scale of the sub-scales
  float dmin = 0.0f;         // super-scale of the mins (q2_k, q4_k, q5_k; else unused, keep 0)
  std::array<int, 16> sc{};  // integer sub-scale per group
  std::array<int, 16> mn{};  // integer min per group (asym types)
  std::array<int, 256> q{};  // integer code per element
};

// Geometry and integer ranges of one k-quant type (the table above).
struct KQuantSpec {
  int groups = 0, group_size = 0;
  bool has_min = false;
  int sc_min = 0, sc_max = 0;
  int mn_max = 0;  // mins range over [0, mn_max]; 0 for the symmetric types
  int q_min = 0, q_max = 0;
};

bool ggml_is_kquant(GgmlType t);
// Unsupported for a type that is not a k-quant.
KQuantSpec ggml_kquant_spec(GgmlType t);

// n elements (a multiple of 256) from n / 256 super-blocks at src; bit-exact with ggml's dequantize_row_q*_K.
void ggml_kquant_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n);
// Writes one super-block (ggml_block_bytes(t) bytes) at dst; InvalidInput naming the field when a
// sub-scale, min or code is out of its range.
void ggml_kquant_pack(GgmlType t, const KQuantBlockParams& p, uint8_t* dst);
// Reads one super-block back into its parameters.
KQuantBlockParams ggml_kquant_unpack(GgmlType t, const uint8_t* src);

}  // namespace ar::quant
