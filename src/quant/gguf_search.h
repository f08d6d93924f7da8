// AutoRound's RTN for ggml types (`--iters 0`): the imatrix-weighted search of the block scales and
// mins (autoround-spec.md §2 GGUF, §5 "gguf k"), AutoRound's port of llama.cpp's k-quant searches.
// The objective of every search is sum_c imat[c] (w - w^)^2 per group; imat is sum over calibration
// tokens of x_c^2 per input channel, its zeros fixed up per group (gguf_steps::imatrix_fix_zeros).
// With no imatrix (or one summing to 0) the searches run on AutoRound's data-free weights.
//
//   q2_k, q4_k, q5_k (asym, groups of 16/32/32): per group wls_asym_search, with imatrix
//     (rrmin, rdelta, nstep) = (-0.9, 0.05, 36) and squared error; without: q2_k (-0.5, 0.1, 15),
//     absolute error, weights |x|; q4_k (-1, 0.1, 20) and q5_k (-0.5, 0.1, 15), squared error, weights
//     |x| + sqrt(sum_group x^2 / 32). Then the group scales and the mins (each >= 0) are quantized per
//     super-block to 4 (q2_k) or 6 bits: with imatrix qp_quants weighted by the group's sum of weights;
//     without, d = max / nmax, sc = min(round(s nmax / max), nmax).
//   q3_k, q6_k (sym, full range, groups of 16): per group qx_quants (rmse_type 1) weighted by the
//     imatrix; without, q3_k q3_quants_rmse and q6_k qx_quants with weights x^2. Then the signed
//     double quant: d = S / -nmax_super (S the group scale of largest magnitude, nmax_super 32 / 128),
//     sc = clamp(round(s / d), -nmax_super, nmax_super - 1).
//   q4_0, q5_0, q8_0: int_sym_search per 32-block (AutoRound's opt-RTN `int.search_scales`), weighted
//     by the imatrix, uniform without one.
//   q4_1, q5_1, f16, bf16, f32: AutoRound has no search (q4_1/q5_1 run `opt_rtn_int_asym_float_zp`,
//     which is min-max RTN): gguf_quantize_rtn.
// In every case d and dmin are then written as fp16 and the codes recomputed against the scales as
// ggml decodes them (fp16 d times the integer sub-scale, minus fp16 dmin times the integer min),
// q = clamp(round((w + dmin mn) / (d sc))), so the packed bytes decode exactly to `What`.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "quant/ggml_types.h"

namespace ar::quant {

// Same contract as gguf_quantize_rtn: packed rows (rows x ggml_row_bytes(t, cols)), `What` (optional,
// rows x cols) the exact dequantized weight; InvalidInput when cols is not a multiple of t's block, or
// when an imatrix entry is negative or not finite. imatrix: [cols] or nullptr. Parallel over rows.
std::vector<uint8_t> gguf_quantize_search(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols,
                                          const float* imatrix, float* What = nullptr);

}  // namespace ar::quant
