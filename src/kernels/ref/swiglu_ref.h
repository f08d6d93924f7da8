// Reference SwiGLU gate: a = silu(g) * u, silu(g) = g * sigmoid(g).
// Backward: du = da * silu(g);  dg = da * u * sig(g) * (1 + g (1 - sig(g))).
#pragma once
#include <cmath>
#include <cstdint>

namespace ar::ref {

template <class T>
void swiglu_fwd(const T* g, const T* u, T* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
}

template <class T>
void swiglu_bwd(const T* da, const T* g, const T* u, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T sg = T(1) / (T(1) + std::exp(-g[i]));
    du[i] = da[i] * g[i] * sg;
    dg[i] = da[i] * u[i] * sg * (T(1) + g[i] * (T(1) - sg));
  }
}

}  // namespace ar::ref
