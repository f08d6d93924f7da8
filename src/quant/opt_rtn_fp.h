// Optimized RTN for the MX (floor) and NVFP4 schemes: AutoRound's `--iters 0` default for them
// (auto_round/data_type/mxfp.py search_mx_scale, nvfp.py search_nvfp4_scale). Per tile, the max-scale
// coefficient c (the QDQ's `init`, qdq_fp.h) that minimizes the imatrix-weighted squared error
//   sum_j qw_j (QDQ_c(w)_j - w_j)^2
// over the candidates, the first (c = 1) kept unless another is strictly better:
//   MX     c in {1, 0.5, 2}        (the shared exponent moves only across powers of two)
//   NVFP4  c in {1, 0.50, 0.51, ..., 1.51}, scored with the tensor's own global scale (the search
//          runs before fused layers share theirs)
// qw: the imatrix of the Linear's input broadcast over its rows, with AutoRound's repair of zero
// entries per tile (_imatrix_handle_zero): a tile with more than half of its entries zero takes
// |w| + sqrt(sum(w^2) / 32) instead, one with fewer has them set to the mean of its others; without
// an imatrix, qw = 1. Losses are summed in double (torch sums fp32; the two can choose differently
// only between candidates whose losses tie to within fp32 rounding).
// MX's _RCEIL variant and FP8 have no search in AutoRound (plain RTN).
#pragma once
#include "core/context.h"
#include "quant/qdq_fp.h"

namespace ar::quant {

// Does AutoRound's `--iters 0` run a search for this family?
bool fp_has_opt_rtn(FpFamily family);

// The chosen coefficient per tile into `init` [sh.tiles()]. W [out, in]; imat [in] or null.
void fp_opt_rtn_init(Context& ctx, const FpQdqShape& sh, const float* W, const float* imat, float* init);

}  // namespace ar::quant
