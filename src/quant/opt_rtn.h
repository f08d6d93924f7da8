// Optimized RTN for full-range symmetric int (autoround-spec.md §5, `int.search_scales`): per group,
// with gmax the signed largest-magnitude weight and m = 2^(b-1), try s = -gmax / (m - delta k) and
// keep the scale minimizing the imatrix-weighted error sum_j imat_j (s q_j - w_j)^2, with
// q = clamp(round(w / s), -m, m - 1). delta = 0.0075 m, k in [-100, 100] (divisor 0.25m..1.75m);
// for 2 bits delta = 0.01, k in [-90, 90]. k = 0 is plain RTN, so the result is never worse than
// RTN on the weighted error. imatrix: sum over calibration tokens of x^2 per input channel (null:
// uniform weights, the data-free search). Scales are cast to fp16 before they are scored.
#pragma once
#include "core/context.h"
#include "quant/qdq_ref.h"

namespace ar::quant {

// W [out, in]; imat [in] or null. Writes What [out, in] and scale [out * groups].
void opt_rtn_sym(Context& ctx, const QdqShape& sh, const float* W, const float* imat, float* What, float* scale);

// Weighted squared error of a QDQ weight (for tests and reports).
double weighted_error(const QdqShape& sh, const float* W, const float* What, const float* imat);

}  // namespace ar::quant
