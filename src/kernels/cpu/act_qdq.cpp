// FP8_STATIC's activation QDQ in fp32 over the pool; the element formulas are the reference's
// (kernels/ref/act_qdq_ref.h). dL/ds is summed per row in double and the rows added in order, so
// its bits do not depend on the thread count.
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/act_qdq_ref.h"

namespace ar::cpu {

void act_qdq_fwd(Context& ctx, const float* x, float s, float* y, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = ref::act_qdq_elem(x[i], s);
  }, ThreadPool::grain(4));
}

double act_qdq_bwd(Context& ctx, const float* x, float s, const float* dq, float* dx, bool acc, int64_t rows,
                   int64_t dim) {
  std::vector<double> row_ds(static_cast<size_t>(rows));
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double sum = 0;
      for (int64_t i = r * dim; i < (r + 1) * dim; ++i) {
        bool pass = false;
        sum += ref::act_qdq_elem_ds(x[i], s, dq[i], &pass);  // fp32 terms, as autograd's
        if (!dx) continue;
        const float g = pass ? dq[i] * s / s : 0.f;
        dx[i] = acc ? dx[i] + g : g;
      }
      row_ds[size_t(r)] = sum;
    }
  }, ThreadPool::grain(4 * dim));
  double ds = 0;
  for (double v : row_ds) ds += v;
  return ds;
}

}  // namespace ar::cpu
