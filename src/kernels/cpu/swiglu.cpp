// SwiGLU gate a = silu(g) * u on flat arrays, silu(g) = g sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g))
// with exp from exp.cpp (blocks of kBlock elements). Reference: kernels/ref/swiglu_ref.h.
#include <algorithm>

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
}  // namespace

void swiglu_fwd(Context& ctx, const float* g, const float* u, float* a, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    with_exp_neg(g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      for (int64_t k = 0; k < len; ++k) a[b + k] = g[b + k] / (1.f + e[k]) * u[b + k];
    });
  }, ThreadPool::grain(8));
}

void swiglu_bwd(Context& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    with_exp_neg(g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      for (int64_t k = 0; k < len; ++k) {
        const int64_t i = b + k;
        const float sg = 1.f / (1.f + e[k]);
        du[i] = da[i] * g[i] * sg;
        dg[i] = da[i] * u[i] * sg * (1.f + g[i] * (1.f - sg));
      }
    });
  }, ThreadPool::grain(8));
}

}  // namespace ar::cpu
