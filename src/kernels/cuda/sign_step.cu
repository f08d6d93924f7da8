#include "kernels/cuda/sign_step.h"

#include "kernels/cuda/launch.h"
#include "quant/sign_step.h"

namespace ar::cuda {

namespace {

__global__ void sign_step_kernel(float* p, const float* d, int64_t n, float rate, bool coef, float* save,
                                 int* nonfinite) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float pi = p[i], di = d[i];
    if (save) save[i] = pi;
    if (nonfinite && !hd::isfinite(di)) *nonfinite = 1;
    p[i] = coef ? quant::coef_step_value(pi, di, rate) : quant::sign_step_value(pi, di, rate);
  }
}

}  // namespace

void sign_step(DeviceContext& ctx, float* p, const float* d, int64_t n, float rate, bool coef, float* save,
               int* nonfinite) {
  if (n == 0) return;
  sign_step_kernel<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(p, d, n, rate, coef, save, nonfinite);
  check(cudaGetLastError(), ctx.index(), "sign step launch");
}

}  // namespace ar::cuda
