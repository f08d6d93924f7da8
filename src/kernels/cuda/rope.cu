#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/ref/rope_ref.h"

namespace ar::cuda {

namespace {

__global__ void rope_heads(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
                           int64_t heads, RopeDims d, bool inverse) {
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < rows * heads;
       u += int64_t(gridDim.x) * blockDim.x)
    ref::rope_head(x, pos, cos, sin, u / heads, u % heads, heads, d, inverse);
}

}  // namespace

void rope(DeviceContext& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
          int64_t heads, const RopeDims& d, bool inverse) {
  if (rows * heads == 0) return;
  rope_heads<<<grid_blocks(rows * heads, kThreads), kThreads, 0, ctx.stream()>>>(x, pos, cos, sin, rows, heads, d,
                                                                                 inverse);
  check(cudaGetLastError(), ctx.index(), "RoPE launch");
}

}  // namespace ar::cuda
