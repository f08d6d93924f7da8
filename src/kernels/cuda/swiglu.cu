#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/ref/gate_act_ref.h"

namespace ar::cuda {

namespace {

__global__ void fwd(GateAct act, const float* g, const float* u, float* a, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    a[i] = ref::gate_elem(act, g[i], u[i]);
}

__global__ void bwd(GateAct act, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    ref::gate_bwd_elem(act, da[i], g[i], u[i], dg + i, du + i);
}

}  // namespace

void swiglu_fwd(DeviceContext& ctx, const float* g, const float* u, float* a, int64_t n, const GateAct& act) {
  if (n == 0) return;
  fwd<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(act, g, u, a, n);
  check(cudaGetLastError(), ctx.index(), "SwiGLU forward launch");
}

void swiglu_bwd(DeviceContext& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n,
                const GateAct& act) {
  if (n == 0) return;
  bwd<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(act, da, g, u, dg, du, n);
  check(cudaGetLastError(), ctx.index(), "SwiGLU backward launch");
}

}  // namespace ar::cuda
