// The gated feed-forward's activation a = act(g, u) of the gate and up projections' outputs, by kind:
//   Silu (SwiGLU, kernels/ref/swiglu_ref.h):  a = silu(g) u
//   ClampedSwiglu (gpt-oss's experts, transformers' GptOssExperts._apply_gate), with gc = min(g, limit)
//     and uc = clamp(u, -limit, limit):  a = (uc + 1) gc sigmoid(alpha gc)
//   GeluTanh (Gemma's gelu_pytorch_tanh, torch's gelu(approximate="tanh")):  a = gelu(g) u with
//     gelu(g) = g/2 (1 + tanh(z)) = g sigmoid(2z), z = sqrt(2/pi) (g + 0.044715 g^3)
// Backward of ClampedSwiglu, with s = sigmoid(alpha gc) and torch's clamp gradient (1 where the input is
// within the bounds, equality included; 0 beyond):  du = da gc s [|u| <= limit],
//   dg = da (uc + 1) s (1 + alpha gc (1 - s)) [g <= limit].
// Backward of GeluTanh, with s = sigmoid(2z) and 2z' = 2 sqrt(2/pi) (1 + 3 0.044715 g^2):
//   du = da g s,  dg = da u s (1 + g (1 - s) 2z').
// The element functions are AR_HD (kernels/cuda/swiglu.cu).
#pragma once
#include <cstdint>

#include "core/hd.h"
#include "kernels/ref/swiglu_ref.h"

namespace ar {

enum class GateKind : uint8_t { Silu, ClampedSwiglu, GeluTanh };

struct GateAct {
  GateKind kind = GateKind::Silu;
  float alpha = 1.702f, limit = 7.0f;  // ClampedSwiglu: the sigmoid's gain and the clamp (swiglu_alpha/limit)
  bool operator==(const GateAct&) const = default;
};

}  // namespace ar

namespace ar::ref {

template <class T>
AR_HD T clamped_swiglu_elem(T g, T u, T alpha, T limit) {
  const T gc = limit < g ? limit : g;
  const T uc = u < -limit ? -limit : u > limit ? limit : u;
  const T s = T(1) / (T(1) + hd::exp(-alpha * gc));
  return (uc + T(1)) * (gc * s);
}

template <class T>
AR_HD void clamped_swiglu_bwd_elem(T da, T g, T u, T alpha, T limit, T* dg, T* du) {
  const T gc = limit < g ? limit : g;
  const T uc = u < -limit ? -limit : u > limit ? limit : u;
  const T s = T(1) / (T(1) + hd::exp(-alpha * gc));
  *du = -limit <= u && u <= limit ? da * gc * s : T(0);
  *dg = g <= limit ? da * (uc + T(1)) * s * (T(1) + alpha * gc * (T(1) - s)) : T(0);
}

// GeluTanh's sigmoid argument 2z and its derivative 2z' (2 sqrt(2/pi) = 1.5957691216057308).
template <class T>
AR_HD T gelu_tanh_arg(T g) {
  return T(1.5957691216057308) * g * (T(1) + T(0.044715) * g * g);
}
template <class T>
AR_HD T gelu_tanh_arg_grad(T g) {
  return T(1.5957691216057308) * (T(1) + T(3 * 0.044715) * g * g);
}

template <class T>
AR_HD T gelu_tanh_elem(T g, T u) {
  const T s = T(1) / (T(1) + hd::exp(-gelu_tanh_arg(g)));
  return g * s * u;
}

template <class T>
AR_HD void gelu_tanh_bwd_elem(T da, T g, T u, T* dg, T* du) {
  const T e = hd::exp(-gelu_tanh_arg(g)), s = T(1) / (T(1) + e);
  *du = da * g * s;
  const T one_minus_s = s < T(0.5) ? T(1) - s : e * s;  // e s near s = 1 (no cancellation); e may be inf below
  *dg = da * u * s * (T(1) + g * one_minus_s * gelu_tanh_arg_grad(g));
}

template <class T>
AR_HD T gate_elem(const GateAct& a, T g, T u) {
  if (a.kind == GateKind::ClampedSwiglu) return clamped_swiglu_elem(g, u, T(a.alpha), T(a.limit));
  if (a.kind == GateKind::GeluTanh) return gelu_tanh_elem(g, u);
  return swiglu_elem(g, u);
}

template <class T>
AR_HD void gate_bwd_elem(const GateAct& a, T da, T g, T u, T* dg, T* du) {
  if (a.kind == GateKind::ClampedSwiglu) return clamped_swiglu_bwd_elem(da, g, u, T(a.alpha), T(a.limit), dg, du);
  if (a.kind == GateKind::GeluTanh) return gelu_tanh_bwd_elem(da, g, u, dg, du);
  swiglu_bwd_elem(da, g, u, dg, du);
}

template <class T>
void gate_fwd(const GateAct& act, const T* g, const T* u, T* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = gate_elem(act, g[i], u[i]);
}

template <class T>
void gate_bwd(const GateAct& act, const T* da, const T* g, const T* u, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate_bwd_elem(act, da[i], g[i], u[i], dg + i, du + i);
}

}  // namespace ar::ref
