#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/ref/rmsnorm_ref.h"

namespace ar::cuda {

namespace {

__global__ void fwd_rows(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                         double eps) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    ref::rmsnorm_fwd_row(x, w, y, rstd, r, dim, eps);
}

__global__ void bwd_rows(const float* dy, const float* x, const float* w, const float* rstd, float* dx, bool acc,
                         int64_t rows, int64_t dim) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    ref::rmsnorm_bwd_row(dy, x, w, rstd, dx, acc, r, dim);
}

__global__ void dw_cols(const float* dy, const float* x, const float* rstd, float* dw, int64_t rows, int64_t dim) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < dim; c += int64_t(gridDim.x) * blockDim.x)
    ref::rmsnorm_dw_col(dy, x, rstd, dw, c, rows, dim);
}

}  // namespace

void rmsnorm_fwd(DeviceContext& ctx, const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                 double eps) {
  if (rows == 0) return;
  fwd_rows<<<grid_blocks(rows, kThreads), kThreads, 0, ctx.stream()>>>(x, w, y, rstd, rows, dim, eps);
  check(cudaGetLastError(), ctx.index(), "RMSNorm forward launch");
}

void rmsnorm_bwd(DeviceContext& ctx, const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                 bool accumulate, float* dw, int64_t rows, int64_t dim) {
  if (rows == 0) return;
  bwd_rows<<<grid_blocks(rows, kThreads), kThreads, 0, ctx.stream()>>>(dy, x, w, rstd, dx, accumulate, rows, dim);
  check(cudaGetLastError(), ctx.index(), "RMSNorm backward launch");
  if (!dw) return;
  dw_cols<<<grid_blocks(dim, kThreads), kThreads, 0, ctx.stream()>>>(dy, x, rstd, dw, rows, dim);
  check(cudaGetLastError(), ctx.index(), "RMSNorm weight-gradient launch");
}

}  // namespace ar::cuda
