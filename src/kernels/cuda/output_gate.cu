// The sigmoid output gate (Qwen3-Next's gated attention): one thread per element, the reference's AR_HD
// element functions (kernels/ref/output_gate_ref.h).
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/ref/output_gate_ref.h"

namespace ar::cuda {

namespace {

__global__ void fwd(const float* o, const float* g, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = ref::output_gate_elem(o[i], g[i]);
}

__global__ void bwd(const float* dy, const float* o, const float* g, float* d_o, float* dg, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    ref::output_gate_bwd_elem(dy[i], o[i], g[i], d_o + i, dg + i);
}

}  // namespace

void output_gate_fwd(DeviceContext& ctx, const float* o, const float* g, float* y, int64_t n) {
  if (n == 0) return;
  fwd<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(o, g, y, n);
  check(cudaGetLastError(), ctx.index(), "output gate forward launch");
}

void output_gate_bwd(DeviceContext& ctx, const float* dy, const float* o, const float* g, float* d_o, float* dg,
                     int64_t n) {
  if (n == 0) return;
  bwd<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(dy, o, g, d_o, dg, n);
  check(cudaGetLastError(), ctx.index(), "output gate backward launch");
}

}  // namespace ar::cuda
