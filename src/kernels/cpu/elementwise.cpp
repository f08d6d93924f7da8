// Residual add y = a + b. Reference: kernels/ref/elementwise_ref.h.
#include "kernels/cpu/ops.h"

namespace ar::cpu {
void add(Context& ctx, const float* a, const float* b, float* y, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
  }, ThreadPool::grain(1));
}
}  // namespace ar::cpu
