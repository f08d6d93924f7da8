// The steps of AutoRound's RTN search for ggml types (autoround-spec.md §2, GGUF; §5), each on one
// group of n values, so they can be checked by hand. gguf_search.cpp assembles them per type.
// Sums are accumulated in double; scales and values are float (AutoRound works in fp32 torch).
// "w" are the per-element weights of the objective (the imatrix, fixed up, or a data-free weight).
#pragma once
#include <cstdint>

namespace ar::quant::gguf_steps {

// AutoRound's zero fix-up of the imatrix of one group (`gguf._imatrix_handle_zero`), written to out[n]:
// entries <= 1e-30 count as zeros; with more than half of AutoRound's group size argument zeros (8 for
// 2 bits, else 16) the group falls back to data-free weights, |x| (bits <= 3) or |x| + sqrt(sum x^2 / 32);
// with fewer, the exact zeros take the mean of the others. AutoRound passes 32 for q3_k/q6_k, whose
// groups have 16 elements, so there the fallback never fires and an all-zero group gets 0/0 (NaN)
// weights; here a group of only zeros always falls back.
void imatrix_fix_zeros(const float* imat, const float* x, int n, int bits, float* out);

// `iterative_wls_quant_search` (AutoRound's port of make_qkx2/qkx3_quants) on one group, codes in
// [0, qmax], model x ~ scale * L + rmin with rmin <= 0. Starts from min-max (rmin = min(min x, 0),
// rmax = max x), then for k in [0, nstep): iscale = (rrmin + rdelta k + qmax) / (rmax - rmin),
// L = clamp(round((x - rmin) iscale)), the weighted least-squares (scale, rmin) for those L (rmin > 0:
// rmin = 0, scale = sum wLx / sum wL^2), the codes re-rounded against that fit, and keeps the fit
// with the lowest weighted squared error (weighted absolute error when mad) when D > 0.
struct AsymFit {
  float scale = 0;  // the group scale
  float min = 0;    // -rmin >= 0 (ggml's "min", subtracted on decode)
};
AsymFit wls_asym_search(const float* x, const float* w, int n, int qmax, float rrmin, float rdelta, int nstep,
                        bool mad);

// AutoRound's `make_qp_quants` (gguf.py; llama.cpp's without its coordinate-descent refinement) on
// v[n] >= 0: max = max v; tries scale = max / (nmax + 0.1 k), k in [-4, 4] (k = 0 first), keeps the
// lowest sum w (v - scale L)^2 with L = min(round(v / scale), nmax), then returns the least-squares
// d = sum wvL / sum wL^2 for the kept L (max / nmax when that sum is 0). L[n] gets the codes.
float qp_quants(const float* v, const float* w, int n, int nmax, int* L);

// llama.cpp's `make_qx_quants` with rmse_type 1 (AutoRound's make_qx_quants_chunk): signed full range,
// codes in [-nmax, nmax - 1]. max = the value of largest |x| (signed); iscale = -(nmax - 0.1 k) / max,
// k = 0 then k in [-9, 9]; a candidate replaces the kept one when (sum wxL)^2 / sum wL^2 is larger;
// returns sum wxL / sum wL^2 of the kept L (negative when max > 0). w == nullptr: w = x^2.
float qx_quants(const float* x, const float* w, int n, int nmax);

// llama.cpp's `make_q3_quants` with do_rmse (AutoRound's q3_k without imatrix): L from iscale =
// -nmax / max, weights x^2, then up to 5 passes of per-element re-rounding L_i = round(x_i sl2 / slx)
// (slx, sl2 the sums without i), accepted when slx > 0 and it raises (sum wxL)^2 / sum wL^2;
// returns sum wxL / sum wL^2.
float q3_quants_rmse(const float* x, int n, int nmax);

// AutoRound's `int.search_scales` for full-range symmetric int on one block (q4_0, q5_0, q8_0):
// gmax = the value of largest |x| (first on ties), m = 2^(bits-1) = -qmin, step = 0.0075 m, candidates
// d = fp16(gmax / -(m - step k)) for k in [-100, 100] (k = 0 first: ggml's round-to-nearest scale),
// codes clamp(round(x / d), -m, m - 1), keeps the lowest sum w (d q - x)^2 (w == nullptr: uniform).
// Scored with d as written (fp16), so the returned d is never worse than the k = 0 one.
float int_sym_search(const float* x, const float* w, int n, int qmin, int qmax);

// The value of largest |x| with its sign, the first one on ties (torch argmax of |x|).
float signed_absmax(const float* x, int n);

}  // namespace ar::quant::gguf_steps
