// ggml's "legacy" 32-element block types q4_0, q4_1, q5_0, q5_1, q8_0: their exact block bytes
// (ggml-common.h block_q*), decoding, packing from parameters decided elsewhere (AutoRound's tuned
// scales and codes), and ggml's own round-to-nearest quantizer as a reference.
//
// Block layouts (little-endian, fp16 = IEEE binary16):
//   q4_0 [d fp16][qs 16 B]                 element i < 16 in the low nibble of qs[i], i >= 16 in the high
//                                          nibble of qs[i - 16]
//   q4_1 [d fp16][m fp16][qs 16 B]         as q4_0
//   q5_0 [d fp16][qh 4 B][qs 16 B]         low 4 bits as q4_0; bit 4 of element i is bit i of the u32 qh
//   q5_1 [d fp16][m fp16][qh 4 B][qs 16 B] as q5_0
//   q8_0 [d fp16][qs 32 x int8]
// Decoding: symmetric types w = d * q, the _1 types w = d * q + m (fp32 arithmetic, as ggml).
#pragma once
#include <array>
#include <cstdint>

#include "quant/ggml_types.h"

namespace ar::quant {

// The parameters of one 32-element block, in the form AutoRound's QDQ produces them.
// Codes are the integers multiplying d, so the symmetric types take signed codes and the stored
// offset (8, 16) is added by pack:
//   q4_0 q in [-8, 7], q5_0 [-16, 15], q8_0 [-128, 127]    w = d * q         (m unused, keep 0)
//   q4_1 q in [0, 15], q5_1 [0, 31]                         w = d * q + m
// d and m are written as fp16 (round to nearest even); pass values already on the fp16 grid (AutoRound
// casts its scales to fp16) and they are written exactly. unpack returns them as exact fp32 values of
// the stored fp16, so pack(unpack(b)) == b for every block whose d and m are not NaN.
struct LegacyBlockParams {
  float d = 0.0f;
  float m = 0.0f;
  std::array<int, 32> q{};
};

bool ggml_is_legacy(GgmlType t);
// Code range of a legacy type (see LegacyBlockParams).
int ggml_legacy_qmin(GgmlType t);
int ggml_legacy_qmax(GgmlType t);

// n elements (a multiple of 32) from n / 32 blocks at src; bit-exact with ggml's dequantize_row_q*.
void ggml_legacy_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n);
// Writes one block (ggml_block_bytes(t) bytes) at dst; InvalidInput when a code is out of range.
void ggml_legacy_pack(GgmlType t, const LegacyBlockParams& p, uint8_t* dst);
// Reads one block back into its parameters.
LegacyBlockParams ggml_legacy_unpack(GgmlType t, const uint8_t* src);

// ggml's reference quantizer (quantize_row_q*_ref, also gguf-py's quantize), n a multiple of 32:
//   q4_0/q5_0: d = x_amax / -8 (/ -16) where x_amax is the first element of largest |x|, with its sign;
//              u = min(trunc(x / d + 8.5 (16.5)), 15 (31))
//   q4_1/q5_1: d = (max - min) / 15 (31), m = min, u = min(trunc((x - min) / d + 0.5), 15 (31))
//   q8_0:      d = amax / 127, q = round-half-away(x / d)
// "x / d" is x * (1/d) in fp32 (0 when d == 0), as ggml computes it; d is rounded to fp16 only when stored.
void ggml_legacy_quantize_ref(GgmlType t, const float* src, uint8_t* dst, int64_t n);

}  // namespace ar::quant
