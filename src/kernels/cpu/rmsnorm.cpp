// RMSNorm on rows of x [rows, dim] (also per-head q/k norm with rows = tokens * heads).
// rstd in fp32 from a double sum of squares; dw reduced from per-thread partial sums in fixed order,
// so results do not depend on scheduling. Reference: kernels/ref/rmsnorm_ref.h.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
// Out = float writes y in place; Out = uint16_t computes a row in fp32 and rounds it to bf16.
template <class Out>
void rmsnorm_fwd_t(Context& ctx, const float* x, const float* w, Out* y, float* rstd, int64_t rows, int64_t dim,
                   double eps) {
  constexpr bool f32 = std::is_same_v<Out, float>;
  const Isa isa = kernel_isa();
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(f32 ? 0 : size_t(dim));
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      double ss = 0;
      for (int64_t c = 0; c < dim; ++c) ss += double(xr[c]) * xr[c];
      float rs = float(1.0 / std::sqrt(ss / double(dim) + eps));
      if (rstd) rstd[r] = rs;
      float* yr = f32 ? reinterpret_cast<float*>(y) + r * dim : row.data();
      for (int64_t c = 0; c < dim; ++c) yr[c] = w[c] * (xr[c] * rs);
      if constexpr (!f32) fp32_to_bf16_serial(row.data(), y + r * dim, dim, isa);
    }
  }, ThreadPool::grain(dim));
}
}  // namespace

void rmsnorm_fwd(Context& ctx, const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                 double eps) {
  rmsnorm_fwd_t(ctx, x, w, y, rstd, rows, dim, eps);
}
void rmsnorm_fwd_bf16(Context& ctx, const float* x, const float* w, uint16_t* y, float* rstd, int64_t rows,
                      int64_t dim, double eps) {
  rmsnorm_fwd_t(ctx, x, w, y, rstd, rows, dim, eps);
}

void rmsnorm_bwd(Context& ctx, const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                 bool accumulate, float* dw, int64_t rows, int64_t dim) {
  const int64_t parts = std::min<int64_t>(ctx.threads(), std::max<int64_t>(1, rows));
  std::vector<float> partial(dw ? size_t(parts * dim) : 0, 0.f);
  ctx.pool().parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* pw = dw ? partial.data() + p * dim : nullptr;
      for (int64_t r = rows * p / parts; r < rows * (p + 1) / parts; ++r) {
        const float* xr = x + r * dim;
        const float* g = dy + r * dim;
        float rs = rstd[r];
        double dot = 0;
        for (int64_t c = 0; c < dim; ++c) dot += double(g[c]) * w[c] * xr[c];
        float m = float(dot * rs / double(dim));
        float* dr = dx + r * dim;
        for (int64_t c = 0; c < dim; ++c) {
          float xh = xr[c] * rs;
          if (pw) pw[c] += g[c] * xh;
          float v = rs * (g[c] * w[c] - xh * m);
          dr[c] = accumulate ? dr[c] + v : v;
        }
      }
    }
  });
  if (dw)
    for (int64_t p = 0; p < parts; ++p)
      for (int64_t c = 0; c < dim; ++c) dw[c] += partial[size_t(p * dim + c)];
}

}  // namespace ar::cpu
