#include "core/dtype.h"
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"

namespace ar::cuda {

namespace {

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}

__global__ void to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = f32_to_bf16(x[i]);
}

__global__ void add_bias_kernel(const float* b, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % cols];
}

// One thread per column, rows in order (as the reference's loop adds them).
__global__ void bias_grad_kernel(const float* dy, float* db, int64_t rows, int64_t cols) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float acc = db[c];
    for (int64_t r = 0; r < rows; ++r) acc += dy[r * cols + c];
    db[c] = acc;
  }
}

}  // namespace

void add(DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(a, b, y, n);
  check(cudaGetLastError(), ctx.index(), "add launch");
}

void to_bf16(DeviceContext& ctx, const float* x, uint16_t* y, int64_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(x, y, n);
  check(cudaGetLastError(), ctx.index(), "bf16 conversion launch");
}

void add_bias(DeviceContext& ctx, const float* b, float* y, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<grid_blocks(rows * cols, kThreads), kThreads, 0, ctx.stream()>>>(b, y, rows, cols);
  check(cudaGetLastError(), ctx.index(), "bias launch");
}

void bias_grad(DeviceContext& ctx, const float* dy, float* db, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  bias_grad_kernel<<<grid_blocks(cols, kThreads), kThreads, 0, ctx.stream()>>>(dy, db, rows, cols);
  check(cudaGetLastError(), ctx.index(), "bias gradient launch");
}

}  // namespace ar::cuda
