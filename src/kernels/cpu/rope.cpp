// Rotary embedding in place on x [rows, heads, D], HF rotate_half pairs (i, i + D/2).
// Reference: kernels/ref/rope_ref.h.
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
void rotate(Context& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
            int64_t heads, int64_t D, float dir) {
  const int64_t h2 = D / 2;
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* c = cos + int64_t(pos[r]) * h2;
      const float* s = sin + int64_t(pos[r]) * h2;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * D;
        for (int64_t i = 0; i < h2; ++i) {
          float a = v[i], b = v[i + h2], si = dir * s[i];
          v[i] = a * c[i] - b * si;
          v[i + h2] = b * c[i] + a * si;
        }
      }
    }
  }, ThreadPool::grain(heads * D));
}
}  // namespace

void rope_fwd(Context& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
              int64_t heads, int64_t D) {
  rotate(ctx, x, pos, cos, sin, rows, heads, D, 1.f);
}

void rope_bwd(Context& ctx, float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
              int64_t heads, int64_t D) {
  rotate(ctx, dx, pos, cos, sin, rows, heads, D, -1.f);
}

}  // namespace ar::cpu
