// SwiGLU gate a = silu(g) * u on flat arrays. Reference: kernels/ref/swiglu_ref.h.
#include <cmath>

#include "kernels/cpu/ops.h"

namespace ar::cpu {

void swiglu_fwd(Context& ctx, const float* g, const float* u, float* a, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) a[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }, ThreadPool::grain(8));
}

void swiglu_bwd(Context& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float sg = 1.f / (1.f + std::exp(-g[i]));
      du[i] = da[i] * g[i] * sg;
      dg[i] = da[i] * u[i] * sg * (1.f + g[i] * (1.f - sg));
    }
  }, ThreadPool::grain(8));
}

}  // namespace ar::cpu
