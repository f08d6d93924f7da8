// Reference RMSNorm (HF Llama semantics, computed in T):
//   rstd_r = 1 / sqrt(mean_c x[r,c]^2 + eps),  y[r,c] = w[c] * x[r,c] * rstd_r
// Backward with xhat = x * rstd:  dw[c] += sum_r dy*xhat,
//   dx = rstd * (dy*w - xhat * mean_c(dy*w*xhat)).  Also used per head for Qwen3 q/k norms.
// The units (one row; dw's one column, summed over rows in order) are AR_HD: the CUDA kernels run them
// one thread each (kernels/cuda/rmsnorm.cu).
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace ar::ref {

template <class T>
AR_HD void rmsnorm_fwd_row(const T* x, const T* w, T* y, T* rstd, int64_t r, int64_t dim, double eps) {
  const T* xr = x + r * dim;
  T ss = 0;
  for (int64_t c = 0; c < dim; ++c) ss += xr[c] * xr[c];
  T rs = T(1) / hd::sqrt(ss / T(dim) + T(eps));
  if (rstd) rstd[r] = rs;
  for (int64_t c = 0; c < dim; ++c) y[r * dim + c] = w[c] * (xr[c] * rs);
}

// Row r of dx (overwritten, or added to when accumulate).
template <class T>
AR_HD void rmsnorm_bwd_row(const T* dy, const T* x, const T* w, const T* rstd, T* dx, bool accumulate, int64_t r,
                           int64_t dim) {
  const T* xr = x + r * dim;
  const T* g = dy + r * dim;
  T rs = rstd[r], dot = 0;
  for (int64_t c = 0; c < dim; ++c) dot += g[c] * w[c] * xr[c] * rs;
  dot /= T(dim);
  for (int64_t c = 0; c < dim; ++c) {
    T xh = xr[c] * rs;
    T v = rs * (g[c] * w[c] - xh * dot);
    dx[r * dim + c] = accumulate ? dx[r * dim + c] + v : v;
  }
}

// dw[c] += sum over rows of dy * xhat, rows in order.
template <class T>
AR_HD void rmsnorm_dw_col(const T* dy, const T* x, const T* rstd, T* dw, int64_t c, int64_t rows, int64_t dim) {
  T acc = dw[c];
  for (int64_t r = 0; r < rows; ++r) acc += dy[r * dim + c] * (x[r * dim + c] * rstd[r]);
  dw[c] = acc;
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
