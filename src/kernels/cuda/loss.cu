#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"

namespace ar::cuda {

namespace {

// One thread per token row, the row's squares summed in double in column order (as the CPU tuner does).
__global__ void mse_rows(const float* y, float* target_dy, const uint8_t* on, int64_t rows, int64_t C, double denom,
                         double* row_loss) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const float* yr = y + r * C;
    float* dr = target_dy + r * C;
    double sum = 0;
    for (int64_t k = 0; k < C; ++k) {
      const double d = on[r] ? double(yr[k]) - double(dr[k]) : 0.0;
      sum += d * d;
      dr[k] = float(2.0 * d / denom);
    }
    row_loss[r] = sum;
  }
}

}  // namespace

void mse_loss_rows(DeviceContext& ctx, const float* y, float* target_dy, const uint8_t* on, int64_t rows, int64_t C,
                   double denom, double* row_loss) {
  if (rows == 0) return;
  mse_rows<<<grid_blocks(rows, kThreads), kThreads, 0, ctx.stream()>>>(y, target_dy, on, rows, C, denom, row_loss);
  check(cudaGetLastError(), ctx.index(), "loss launch");
}

}  // namespace ar::cuda
