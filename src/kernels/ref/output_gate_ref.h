// Reference sigmoid output gate (Qwen3-Next's gated attention, model/attention_gqa.h): y = o sigmoid(g).
// Backward: do = dy sigmoid(g);  dg = dy o sigmoid(g) (1 - sigmoid(g)).
// The element functions are AR_HD (kernels/cuda/output_gate.cu); kernels/cpu/output_gate.cpp computes the
// same formulas from exp(-g).
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace ar::ref {

template <class T>
AR_HD T output_gate_elem(T o, T g) {
  return o / (T(1) + hd::exp(-g));
}

template <class T>
AR_HD void output_gate_bwd_elem(T dy, T o, T g, T* d_o, T* dg) {
  const T s = T(1) / (T(1) + hd::exp(-g));
  *d_o = dy * s;
  *dg = dy * o * s * (T(1) - s);
}

template <class T>
void output_gate_fwd(const T* o, const T* g, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = output_gate_elem(o[i], g[i]);
}

template <class T>
void output_gate_bwd(const T* dy, const T* o, const T* g, T* d_o, T* dg, int64_t n) {
  for (int64_t i = 0; i < n; ++i) output_gate_bwd_elem(dy[i], o[i], g[i], d_o + i, dg + i);
}

}  // namespace ar::ref
