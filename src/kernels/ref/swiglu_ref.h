// Reference SwiGLU gate: a = silu(g) * u, silu(g) = g * sigmoid(g).
// Backward: du = da * silu(g);  dg = da * u * sig(g) * (1 + g (1 - sig(g))).
// The element functions are AR_HD (kernels/cuda/swiglu.cu).
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace ar::ref {

template <class T>
AR_HD T swiglu_elem(T g, T u) {
  return g / (T(1) + hd::exp(-g)) * u;
}

template <class T>
AR_HD void swiglu_bwd_elem(T da, T g, T u, T* dg, T* du) {
  T sg = T(1) / (T(1) + hd::exp(-g));
  *du = da * g * sg;
  *dg = da * u * sg * (T(1) + g * (T(1) - sg));
}

template <class T>
void swiglu_fwd(const T* g, const T* u, T* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = swiglu_elem(g[i], u[i]);
}

template <class T>
void swiglu_bwd(const T* da, const T* g, const T* u, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) swiglu_bwd_elem(da[i], g[i], u[i], dg + i, du + i);
}

}  // namespace ar::ref
