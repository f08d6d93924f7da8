// Embedding rows E [vocab, dim] gathered by ids. Backward scatters serially in row order, so repeated
// ids accumulate deterministically. Reference: kernels/ref/embedding_ref.h.
#include <cstring>

#include "kernels/cpu/ops.h"

namespace ar::cpu {
void embedding_fwd(Context& ctx, const float* E, const int32_t* ids, float* out, int64_t rows, int64_t dim, float scale) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      std::memcpy(out + r * dim, E + int64_t(ids[r]) * dim, size_t(dim) * 4);
      if (scale != 1.f)
        for (int64_t c = 0; c < dim; ++c) out[r * dim + c] *= scale;
    }
  }, 16);
}
void embedding_bwd(Context& ctx, const float* dout, const int32_t* ids, float* dE, int64_t rows, int64_t dim) {
  // Threads split the feature dimension: each owns disjoint columns, rows are visited in order.
  ctx.pool().parallel_for(dim, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) dE[int64_t(ids[r]) * dim + c] += dout[r * dim + c];
  }, 64);
}
}  // namespace ar::cpu
