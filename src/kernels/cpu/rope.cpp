// Rotary embedding in place on x [rows, heads, stride], the RopeDims part of each head: HF rotate_half pairs
// (i, i + dims/2) or interleaved pairs (2i, 2i + 1).
// Reference: kernels/ref/rope_ref.h.
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
void rotate(Context& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
            int64_t heads, const RopeDims& d, float dir) {
  const int64_t h2 = d.dims / 2, step = d.interleaved ? 2 : 1, other = d.interleaved ? 1 : h2;
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* c = cos + int64_t(pos[r]) * h2;
      const float* s = sin + int64_t(pos[r]) * h2;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * d.stride + d.off;
        for (int64_t i = 0; i < h2; ++i) {
          float* pa = v + i * step;
          float a = pa[0], b = pa[other], si = dir * s[i];
          pa[0] = a * c[i] - b * si;
          pa[other] = b * c[i] + a * si;
        }
      }
    }
  }, ThreadPool::grain(heads * d.dims));
}
}  // namespace

void rope_fwd(Context& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
              int64_t heads, const RopeDims& d) {
  rotate(ctx, x, pos, cos, sin, rows, heads, d, 1.f);
}

void rope_bwd(Context& ctx, float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
              int64_t heads, const RopeDims& d) {
  rotate(ctx, dx, pos, cos, sin, rows, heads, d, -1.f);
}

}  // namespace ar::cpu
