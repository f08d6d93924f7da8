// A 2-D weight [rows, cols] quantized to a ggml type by round-to-nearest, in AutoRound's
// parameterization (autoround-spec.md §2, GGUF; the untuned starting point of its `_dq` types):
//   k-quants, asym (q2_k, q4_k, q5_k): per group lo = min(min w, 0), hi = max(max w, 0),
//     s = (hi - lo) / qmax, m = -lo; per super-block d = fp16(max s / sc_max), sc = round(s / d),
//     dmin = fp16(max m / mn_max), mn = round(m / dmin) (clamped to their ranges);
//     q = clamp(round((w + dmin mn) / (d sc)), 0, qmax)
//   k-quants, sym (q3_k, q6_k), full range: per group s = (the signed value of largest |w|) / qmin,
//     so the larger side maps to the most negative code; per super-block d = fp16(S / sc_min) with S
//     the s of largest |s| (sign kept), sc = clamp(round(s / d)); q = clamp(round(w / (d sc)))
//   legacy sym (q4_0, q5_0, q8_0): d = fp16(signed max / qmin), q = clamp(round(w / d))
//   legacy asym (q4_1, q5_1): d = fp16((hi - lo) / qmax), m = fp16(lo), q = clamp(round((w - m) / d))
//   f16 / bf16 / f32: the values rounded to the type (round to nearest even).
// The codes are decided against the scales as written (fp16 d, integer sub-scales), so the packed
// bytes decode (ggml_dequantize) exactly to the returned dequantized weight.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "quant/ggml_kquants.h"
#include "quant/ggml_legacy.h"
#include "quant/ggml_types.h"
#include "quant/qdq_fixed.h"

namespace ar::quant {

// Packed rows (rows x ggml_row_bytes(t, cols)); `What` (optional, rows x cols) gets the dequantized
// weight. InvalidInput when cols is not a multiple of t's block.
std::vector<uint8_t> gguf_quantize_rtn(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols,
                                       float* What = nullptr);

// The same split in two, for SignRound through a GGUF type (qdq_fixed.h): the block parameters (scales,
// mins and their super-scales; the codes are decided later), the per-group (s, m) they mean, and the
// packing with the codes of the tuned rounding.
struct GgufLayerParams {
  GgmlType type = GgmlType::F16;
  int64_t rows = 0, cols = 0;
  std::vector<KQuantBlockParams> k;       // k-quants: rows * cols / 256
  std::vector<LegacyBlockParams> legacy;  // legacy types: rows * cols / 32
  bool quantized() const { return !k.empty() || !legacy.empty(); }
  FixedQdq qdq() const;  // group, code range of the type
};
// Unsupported for f16/bf16/f32 (nothing to tune).
GgufLayerParams gguf_params_rtn(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols);
// The parameters held by packed rows (e.g. gguf_quantize_search's), codes included.
GgufLayerParams gguf_params_from_bytes(GgmlType t, int64_t rows, int64_t cols, const std::vector<uint8_t>& bytes);
// s, m per group ([rows * cols / group]): w^ = s q - m decodes as ggml does.
void gguf_group_scales(const GgufLayerParams& p, float* s, float* m);
// Codes q = clamp(round((w + m) / s + V)) (V [rows, cols] or null) into p, then the packed rows; `What`
// (optional) gets their decoding, equal to qdq_fixed_fwd of the same V.
std::vector<uint8_t> gguf_pack_codes(Context& ctx, GgufLayerParams& p, const float* W, const float* V,
                                     float* What = nullptr);

}  // namespace ar::quant
