// Reference RMSNorm (HF Llama semantics, computed in T):
//   rstd_r = 1 / sqrt(mean_c x[r,c]^2 + eps),  y[r,c] = w[c] * x[r,c] * rstd_r
// Backward with xhat = x * rstd:  dw[c] += sum_r dy*xhat,
//   dx = rstd * (dy*w - xhat * mean_c(dy*w*xhat)).  Also used per head for Qwen3 q/k norms.
// The units are AR_HD, shared with the CUDA kernels (kernels/cuda/rmsnorm.cu): a row's columns split over
// lanes (a warp per row there), and dw's column sums cut into chunks of rows.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace ar::ref {

// Lane units: lane l of `lanes` takes columns l, l + lanes, ... of a row. A row is lane 0 of 1 (the CPU's
// order); the row-parallel CUDA kernels run a warp per row, 32 lanes whose partial sums combine by an xor
// butterfly (every lane ends with the same bits: each step adds the same two values).
template <class T>
AR_HD T rmsnorm_sumsq_lane(const T* xr, int64_t dim, int lane, int lanes) {
  T ss = 0;
  for (int64_t c = lane; c < dim; c += lanes) ss += xr[c] * xr[c];
  return ss;
}

template <class T>
AR_HD T rmsnorm_rstd(T sumsq, int64_t dim, double eps) {
  return T(1) / hd::sqrt(sumsq / T(dim) + T(eps));
}

template <class T>
AR_HD void rmsnorm_fwd_lane(const T* xr, const T* w, T* yr, T rs, int64_t dim, int lane, int lanes) {
  for (int64_t c = lane; c < dim; c += lanes) yr[c] = w[c] * (xr[c] * rs);
}

// The lane's part of sum_c dy*w*xhat.
template <class T>
AR_HD T rmsnorm_bwd_dot_lane(const T* g, const T* w, const T* xr, T rs, int64_t dim, int lane, int lanes) {
  T dot = 0;
  for (int64_t c = lane; c < dim; c += lanes) dot += g[c] * w[c] * xr[c] * rs;
  return dot;
}

// The lane's columns of dx, given mean_c(dy*w*xhat); overwritten, or added to when accumulate.
template <class T>
AR_HD void rmsnorm_bwd_lane(const T* g, const T* w, const T* xr, T rs, T dot_mean, T* dxr, bool accumulate,
                            int64_t dim, int lane, int lanes) {
  for (int64_t c = lane; c < dim; c += lanes) {
    T xh = xr[c] * rs;
    T v = rs * (g[c] * w[c] - xh * dot_mean);
    dxr[c] = accumulate ? dxr[c] + v : v;
  }
}

template <class T>
AR_HD void rmsnorm_fwd_row(const T* x, const T* w, T* y, T* rstd, int64_t r, int64_t dim, double eps) {
  const T rs = rmsnorm_rstd(rmsnorm_sumsq_lane(x + r * dim, dim, 0, 1), dim, eps);
  if (rstd) rstd[r] = rs;
  rmsnorm_fwd_lane(x + r * dim, w, y + r * dim, rs, dim, 0, 1);
}

// Row r of dx (overwritten, or added to when accumulate).
template <class T>
AR_HD void rmsnorm_bwd_row(const T* dy, const T* x, const T* w, const T* rstd, T* dx, bool accumulate, int64_t r,
                           int64_t dim) {
  const T rs = rstd[r];
  const T dot = rmsnorm_bwd_dot_lane(dy + r * dim, w, x + r * dim, rs, dim, 0, 1) / T(dim);
  rmsnorm_bwd_lane(dy + r * dim, w, x + r * dim, rs, dot, dx + r * dim, accumulate, dim, 0, 1);
}

// dw[c] += sum over rows of dy * xhat, rows in order.
template <class T>
AR_HD void rmsnorm_dw_col(const T* dy, const T* x, const T* rstd, T* dw, int64_t c, int64_t rows, int64_t dim) {
  T acc = dw[c];
  for (int64_t r = 0; r < rows; ++r) acc += dy[r * dim + c] * (x[r * dim + c] * rstd[r]);
  dw[c] = acc;
}

// Rows [r0, r1) of column c's dw sum, in order: the row-parallel kernels' chunk; dw[c] then adds the chunks
// in order.
template <class T>
AR_HD T rmsnorm_dw_chunk(const T* dy, const T* x, const T* rstd, int64_t c, int64_t r0, int64_t r1, int64_t dim) {
  T acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += dy[r * dim + c] * (x[r * dim + c] * rstd[r]);
  return acc;
}

template <class T>
void rmsnorm_fwd(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm_fwd_row(x, w, y, rstd, r, dim, eps);
}

// dx is overwritten (or added to when accumulate); dw accumulates.
template <class T>
void rmsnorm_bwd(const T* dy, const T* x, const T* w, const T* rstd, T* dx, bool accumulate, T* dw, int64_t rows,
                 int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm_bwd_row(dy, x, w, rstd, dx, accumulate, r, dim);
  if (dw)
    for (int64_t c = 0; c < dim; ++c) rmsnorm_dw_col(dy, x, rstd, dw, c, rows, dim);
}

}  // namespace ar::ref
