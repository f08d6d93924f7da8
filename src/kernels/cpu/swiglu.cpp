// SwiGLU gate a = silu(g) * u on flat arrays, silu(g) = g sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g))
// with exp from exp.cpp (blocks of kBlock elements); fp32 or bf16 outputs (bf16_ops.h).
// Reference: kernels/ref/swiglu_ref.h.
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr int64_t kBlock = 256;

// fn(i0, len, e) for blocks of [i0, i1), e[k] = exp(-g[i0 + k]).
template <class Fn>
void with_exp_neg(const float* g, int64_t i0, int64_t i1, Fn fn) {
  float e[kBlock];
  for (int64_t b = i0; b < i1; b += kBlock) {
    const int64_t len = std::min(kBlock, i1 - b);
    for (int64_t k = 0; k < len; ++k) e[k] = -g[b + k];
    exp_inplace(e, len);
    fn(b, len, e);
  }
}

// Out = float writes the results in place; Out = uint16_t computes a block in fp32 on the stack and
// rounds it to bf16 (fp32_to_bf16's bits).
template <class Out>
void swiglu_fwd_t(Context& ctx, const float* g, const float* u, Out* a, int64_t n) {
  constexpr bool f32 = std::is_same_v<Out, float>;
  const Isa isa = kernel_isa();
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    float buf[kBlock];
    with_exp_neg(g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      float* y = f32 ? reinterpret_cast<float*>(a) + b : buf;
      for (int64_t k = 0; k < len; ++k) y[k] = g[b + k] / (1.f + e[k]) * u[b + k];
      if constexpr (!f32) fp32_to_bf16_serial(buf, a + b, len, isa);
    });
  }, ThreadPool::grain(8));
}

template <class Out>
void swiglu_bwd_t(Context& ctx, const float* da, const float* g, const float* u, Out* dg, Out* du, int64_t n) {
  constexpr bool f32 = std::is_same_v<Out, float>;
  const Isa isa = kernel_isa();
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    float bg[kBlock], bu[kBlock];
    with_exp_neg(g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      float* yg = f32 ? reinterpret_cast<float*>(dg) + b : bg;
      float* yu = f32 ? reinterpret_cast<float*>(du) + b : bu;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t i = b + k;
        const float sg = 1.f / (1.f + e[k]);
        yu[k] = da[i] * g[i] * sg;
        yg[k] = da[i] * u[i] * sg * (1.f + g[i] * (1.f - sg));
      }
      if constexpr (!f32) {
        fp32_to_bf16_serial(bg, dg + b, len, isa);
        fp32_to_bf16_serial(bu, du + b, len, isa);
      }
    });
  }, ThreadPool::grain(8));
}
}  // namespace

void swiglu_fwd(Context& ctx, const float* g, const float* u, float* a, int64_t n) { swiglu_fwd_t(ctx, g, u, a, n); }
void swiglu_fwd_bf16(Context& ctx, const float* g, const float* u, uint16_t* a, int64_t n) {
  swiglu_fwd_t(ctx, g, u, a, n);
}
void swiglu_bwd(Context& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n) {
  swiglu_bwd_t(ctx, da, g, u, dg, du, n);
}
void swiglu_bwd_bf16(Context& ctx, const float* da, const float* g, const float* u, uint16_t* dg, uint16_t* du,
                     int64_t n) {
  swiglu_bwd_t(ctx, da, g, u, dg, du, n);
}

}  // namespace ar::cpu
