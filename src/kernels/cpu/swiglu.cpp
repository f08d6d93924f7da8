// The gated activation a = act(g, u) on flat arrays (kernels/ref/gate_act_ref.h): SwiGLU a = silu(g) u,
// silu(g) = g sigmoid(g), gpt-oss's clamped SwiGLU and Gemma's GeLU-tanh gelu(g) u = g sigmoid(2z) u;
// sigmoid(z) = 1 / (1 + exp(-z)) with exp from exp.cpp (blocks of kBlock elements); fp32 or bf16 outputs
// (bf16_ops.h).
// Reference: kernels/ref/gate_act_ref.h (SwiGLU: kernels/ref/swiglu_ref.h).
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr int64_t kBlock = 256;

// e[k] = -z of the sigmoid's argument z: g (SwiGLU), alpha min(g, limit) (clamped), 2z (GeLU-tanh); one
// loop per kind, so each vectorizes.
void neg_gate_args(const GateAct& a, const float* g, float* e, int64_t len) {
  if (a.kind == GateKind::ClampedSwiglu)
    for (int64_t k = 0; k < len; ++k) e[k] = -(a.alpha * std::min(g[k], a.limit));
  else if (a.kind == GateKind::GeluTanh)
    for (int64_t k = 0; k < len; ++k) e[k] = -ref::gelu_tanh_arg(g[k]);
  else
    for (int64_t k = 0; k < len; ++k) e[k] = -g[k];
}

// fn(b, len, e) for blocks of [i0, i1), e[k] = exp(-z) of element b + k's sigmoid argument z.
template <class Fn>
void with_exp_neg(const GateAct& act, const float* g, int64_t i0, int64_t i1, Fn fn) {
  float e[kBlock];
  for (int64_t b = i0; b < i1; b += kBlock) {
    const int64_t len = std::min(kBlock, i1 - b);
    neg_gate_args(act, g + b, e, len);
    exp_inplace(e, len);
    fn(b, len, e);
  }
}

// One block's dg, du (kernels/ref/gate_act_ref.h's *_bwd_elem) from e = exp(-z), one loop per kind.
void gate_bwd_block(const GateAct& act, const float* da, const float* g, const float* u, const float* e, float* yg,
                    float* yu, int64_t len) {
  const float L = act.limit, alpha = act.alpha;
  if (act.kind == GateKind::ClampedSwiglu) {
    for (int64_t k = 0; k < len; ++k) {
      const float s = 1.f / (1.f + e[k]), gc = std::min(g[k], L), uc = std::clamp(u[k], -L, L);
      yu[k] = -L <= u[k] && u[k] <= L ? da[k] * gc * s : 0.f;
      yg[k] = g[k] <= L ? da[k] * (uc + 1.f) * s * (1.f + alpha * gc * (1.f - s)) : 0.f;
    }
  } else if (act.kind == GateKind::GeluTanh) {
    for (int64_t k = 0; k < len; ++k) {
      const float s = 1.f / (1.f + e[k]), one_minus_s = s < 0.5f ? 1.f - s : e[k] * s;
      yu[k] = da[k] * g[k] * s;
      yg[k] = da[k] * u[k] * s * (1.f + g[k] * one_minus_s * ref::gelu_tanh_arg_grad(g[k]));
    }
  } else {
    for (int64_t k = 0; k < len; ++k) {
      const float s = 1.f / (1.f + e[k]);
      yu[k] = da[k] * g[k] * s;
      yg[k] = da[k] * u[k] * s * (1.f + g[k] * (1.f - s));
    }
  }
}

// Out = float writes the results in place; Out = uint16_t computes a block in fp32 on the stack and
// rounds it to bf16 (fp32_to_bf16's bits).
template <class Out>
void gate_fwd_t(Context& ctx, const GateAct& act, const float* g, const float* u, Out* a, int64_t n) {
  constexpr bool f32 = std::is_same_v<Out, float>;
  const Isa isa = kernel_isa();
  const bool clamped = act.kind == GateKind::ClampedSwiglu;
  const float L = act.limit;
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    float buf[kBlock];
    with_exp_neg(act, g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      float* y = f32 ? reinterpret_cast<float*>(a) + b : buf;
      if (clamped)
        for (int64_t k = 0; k < len; ++k)
          y[k] = (std::clamp(u[b + k], -L, L) + 1.f) * (std::min(g[b + k], L) * (1.f / (1.f + e[k])));
      else
        for (int64_t k = 0; k < len; ++k) y[k] = g[b + k] / (1.f + e[k]) * u[b + k];
      if constexpr (!f32) fp32_to_bf16_serial(buf, a + b, len, isa);
    });
  }, ThreadPool::grain(8));
}

template <class Out>
void gate_bwd_t(Context& ctx, const GateAct& act, const float* da, const float* g, const float* u, Out* dg, Out* du,
                int64_t n) {
  constexpr bool f32 = std::is_same_v<Out, float>;
  const Isa isa = kernel_isa();
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    float bg[kBlock], bu[kBlock];
    with_exp_neg(act, g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      float* yg = f32 ? reinterpret_cast<float*>(dg) + b : bg;
      float* yu = f32 ? reinterpret_cast<float*>(du) + b : bu;
      gate_bwd_block(act, da + b, g + b, u + b, e, yg, yu, len);
      if constexpr (!f32) {
        fp32_to_bf16_serial(bg, dg + b, len, isa);
        fp32_to_bf16_serial(bu, du + b, len, isa);
      }
    });
  }, ThreadPool::grain(8));
}
}  // namespace

void swiglu_fwd(Context& ctx, const float* g, const float* u, float* a, int64_t n, const GateAct& act) {
  gate_fwd_t(ctx, act, g, u, a, n);
}
void swiglu_fwd_bf16(Context& ctx, const float* g, const float* u, uint16_t* a, int64_t n, const GateAct& act) {
  gate_fwd_t(ctx, act, g, u, a, n);
}
void swiglu_bwd(Context& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n,
                const GateAct& act) {
  gate_bwd_t(ctx, act, da, g, u, dg, du, n);
}
void swiglu_bwd_bf16(Context& ctx, const float* da, const float* g, const float* u, uint16_t* dg, uint16_t* du,
                     int64_t n, const GateAct& act) {
  gate_bwd_t(ctx, act, da, g, u, dg, du, n);
}

}  // namespace ar::cpu
