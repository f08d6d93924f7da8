// RMSNorm on the device, row-parallel: a warp per row (32 lanes over its columns, coalesced; the lanes'
// sums combine by an xor butterfly, so every lane holds the same bits), and dw's column sums in chunks of
// kDwChunk rows, added in chunk order. The arithmetic is kernels/ref/rmsnorm_ref.h's lane units; the order
// is fixed by the launch, so two runs give the same bits.
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/ref/rmsnorm_ref.h"

namespace ar::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;
constexpr int64_t kDwChunk = 256;

__device__ float warp_sum(float v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The warp's rows: a grid-stride loop whose bounds are the same for all 32 lanes (the shuffles need them all).
struct WarpRows {
  int lane;
  int64_t first, step;
  __device__ WarpRows()
      : lane(int(threadIdx.x) % kWarp),
        first(int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp),
        step(int64_t(gridDim.x) * kRowsPerBlock) {}
};

__global__ void fwd_rows(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                         double eps) {
  const WarpRows wr;
  for (int64_t r = wr.first; r < rows; r += wr.step) {
    const float* xr = x + r * dim;
    const float rs = ref::rmsnorm_rstd(warp_sum(ref::rmsnorm_sumsq_lane(xr, dim, wr.lane, kWarp)), dim, eps);
    if (rstd && wr.lane == 0) rstd[r] = rs;
    ref::rmsnorm_fwd_lane(xr, w, y + r * dim, rs, dim, wr.lane, kWarp);
  }
}

__global__ void bwd_rows(const float* dy, const float* x, const float* w, const float* rstd, float* dx, bool acc,
                         int64_t rows, int64_t dim) {
  const WarpRows wr;
  for (int64_t r = wr.first; r < rows; r += wr.step) {
    const float* g = dy + r * dim;
    const float* xr = x + r * dim;
    const float rs = rstd[r];
    const float dot = warp_sum(ref::rmsnorm_bwd_dot_lane(g, w, xr, rs, dim, wr.lane, kWarp)) / float(dim);
    ref::rmsnorm_bwd_lane(g, w, xr, rs, dot, dx + r * dim, acc, dim, wr.lane, kWarp);
  }
}

// partial[k, c] = column c's sum over chunk k's rows (blockIdx.y strides over chunks).
__global__ void dw_chunks(const float* dy, const float* x, const float* rstd, float* partial, int64_t rows,
                          int64_t dim, int64_t chunks) {
  for (int64_t k = blockIdx.y; k < chunks; k += gridDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < dim; c += int64_t(gridDim.x) * blockDim.x) {
      const int64_t r0 = k * kDwChunk, r1 = r0 + kDwChunk < rows ? r0 + kDwChunk : rows;
      partial[k * dim + c] = ref::rmsnorm_dw_chunk(dy, x, rstd, c, r0, r1, dim);
    }
}

__global__ void dw_add_chunks(const float* partial, float* dw, int64_t dim, int64_t chunks) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < dim; c += int64_t(gridDim.x) * blockDim.x) {
    float acc = dw[c];
    for (int64_t k = 0; k < chunks; ++k) acc += partial[k * dim + c];
    dw[c] = acc;
  }
}

}  // namespace

void rmsnorm_fwd(DeviceContext& ctx, const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                 double eps) {
  if (rows == 0) return;
  fwd_rows<<<grid_blocks(rows, kRowsPerBlock), kThreads, 0, ctx.stream()>>>(x, w, y, rstd, rows, dim, eps);
  check(cudaGetLastError(), ctx.index(), "RMSNorm forward launch");
}

void rmsnorm_bwd(DeviceContext& ctx, const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                 bool accumulate, float* dw, int64_t rows, int64_t dim) {
  if (rows == 0) return;
  bwd_rows<<<grid_blocks(rows, kRowsPerBlock), kThreads, 0, ctx.stream()>>>(dy, x, w, rstd, dx, accumulate, rows,
                                                                             dim);
  check(cudaGetLastError(), ctx.index(), "RMSNorm backward launch");
  if (!dw) return;
  const int64_t chunks = (rows + kDwChunk - 1) / kDwChunk;
  // Freed on return and handed out again only to work queued after these kernels on the same stream.
  DeviceArray<float> partial = ctx.alloc<float>(chunks * dim);
  const dim3 grid(grid_blocks(dim, kThreads), unsigned(chunks < 65535 ? chunks : 65535));
  dw_chunks<<<grid, kThreads, 0, ctx.stream()>>>(dy, x, rstd, partial.data(), rows, dim, chunks);
  check(cudaGetLastError(), ctx.index(), "RMSNorm weight-gradient launch");
  dw_add_chunks<<<grid_blocks(dim, kThreads), kThreads, 0, ctx.stream()>>>(partial.data(), dw, dim, chunks);
  check(cudaGetLastError(), ctx.index(), "RMSNorm weight-gradient sum launch");
}

}  // namespace ar::cuda
