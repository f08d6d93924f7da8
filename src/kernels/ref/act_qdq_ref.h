// FP8_STATIC's activation QDQ in front of a Linear (AutoRound's quant_fp8_sym with a static
// tensor_max and act_group_size 0: one scale s for the whole input):
//   u = x / s;  q = e4m3(clamp(u, -448, 448)) * s
// Backward, as autograd takes it through AutoRound's graph (straight-through rounding; torch's clamp
// passes no gradient at its bounds, only strictly inside; the division's gradient is (dq s) / s):
//   dx = (dq s) / s where |u| < 448, else 0
//   dL/ds = sum of dq * (e4m3(u) - u) where |u| < 448, dq * 448 sign(u) where clamped
// The element formulas live here once; kernels/cpu/act_qdq.cpp runs them in fp32 over the pool.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/small_float.h"

namespace ar::ref {

template <class T>
inline T act_qdq_elem(T x, T s) {
  const T u = std::clamp(x / s, T(-kE4M3Max), T(kE4M3Max));
  return T(e4m3_round(float(u))) * s;
}

// dq's contribution to dL/ds at x; *pass is the clamp's mask (dx = dq * pass).
template <class T>
inline T act_qdq_elem_ds(T x, T s, T dq, bool* pass) {
  const T u = x / s;
  *pass = u > T(-kE4M3Max) && u < T(kE4M3Max);
  if (!*pass) return dq * (u > 0 ? T(kE4M3Max) : T(-kE4M3Max));
  return dq * (T(e4m3_round(float(u))) - u);
}

template <class T>
void act_qdq_fwd(const T* x, T s, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = act_qdq_elem(x[i], s);
}

// dx (may be null: dL/ds only) is written, or added to with acc; returns dL/ds summed in order.
template <class T>
T act_qdq_bwd(const T* x, T s, const T* dq, T* dx, bool acc, int64_t n) {
  T ds = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool pass = false;
    ds += act_qdq_elem_ds(x[i], s, dq[i], &pass);
    if (!dx) continue;
    const T g = pass ? dq[i] * s / s : T(0);
    dx[i] = acc ? dx[i] + g : g;
  }
  return ds;
}

}  // namespace ar::ref
