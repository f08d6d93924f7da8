// Reference RMSNorm (HF Llama semantics, computed in T):
//   rstd_r = 1 / sqrt(mean_c x[r,c]^2 + eps),  y[r,c] = w[c] * x[r,c] * rstd_r
// Backward with xhat = x * rstd:  dw[c] += sum_r dy*xhat,
//   dx = rstd * (dy*w - xhat * mean_c(dy*w*xhat)).  Also used per head for Qwen3 q/k norms.
#pragma once
#include <cmath>
#include <cstdint>

namespace ar::ref {

template <class T>
void rmsnorm_fwd(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T ss = 0;
    for (int64_t c = 0; c < dim; ++c) ss += xr[c] * xr[c];
    T rs = T(1) / std::sqrt(ss / T(dim) + T(eps));
    if (rstd) rstd[r] = rs;
    for (int64_t c = 0; c < dim; ++c) y[r * dim + c] = w[c] * (xr[c] * rs);
  }
}

// dx is overwritten (or added to when accumulate); dw accumulates.
template <class T>
void rmsnorm_bwd(const T* dy, const T* x, const T* w, const T* rstd, T* dx, bool accumulate, T* dw, int64_t rows,
                 int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* g = dy + r * dim;
    T rs = rstd[r], dot = 0;
    for (int64_t c = 0; c < dim; ++c) dot += g[c] * w[c] * xr[c] * rs;
    dot /= T(dim);
    for (int64_t c = 0; c < dim; ++c) {
      T xh = xr[c] * rs;
      if (dw) dw[c] += g[c] * xh;
      T v = rs * (g[c] * w[c] - xh * dot);
      dx[r * dim + c] = accumulate ? dx[r * dim + c] + v : v;
    }
  }
}

}  // namespace ar::ref
