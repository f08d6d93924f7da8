#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/ref/attention_units.h"

namespace ar::cuda {

namespace {

// Units over queries (b, h, i) or keys (b, hk, j), one thread each.
__global__ void fwd_queries(ref::AttnShape s, const float* q, const float* k, const float* v, const uint8_t* m,
                            float* o, float* lse) {
  const int64_t n = s.B * s.H * s.Tq;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x)
    ref::attn_fwd_query(s, q, k, v, m, o, lse, u / (s.H * s.Tq), (u / s.Tq) % s.H, u % s.Tq);
}

__global__ void delta_queries(ref::AttnShape s, const float* o, const float* dout, float* delta) {
  const int64_t n = s.B * s.H * s.Tq;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x)
    ref::attn_delta_query(s, o, dout, delta, u / (s.H * s.Tq), (u / s.Tq) % s.H, u % s.Tq);
}

__global__ void dq_queries(ref::AttnShape s, const float* q, const float* k, const float* v, const uint8_t* m,
                           const float* lse, const float* delta, const float* dout, float* dq) {
  const int64_t n = s.B * s.H * s.Tq;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x)
    ref::attn_dq_query(s, q, k, v, m, lse, delta, dout, dq, u / (s.H * s.Tq), (u / s.Tq) % s.H, u % s.Tq);
}

__global__ void dkv_keys(ref::AttnShape s, const float* q, const float* k, const float* v, const uint8_t* m,
                         const float* lse, const float* delta, const float* dout, float* dk, float* dv) {
  const int64_t n = s.B * s.Hkv * s.Tk;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x)
    ref::attn_dkv_key(s, q, k, v, m, lse, delta, dout, dk, dv, u / (s.Hkv * s.Tk), (u / s.Tk) % s.Hkv, u % s.Tk);
}

constexpr int kAttnThreads = 64;  // long serial units: small blocks spread them over the multiprocessors

}  // namespace

void attention_fwd(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse, AttnKernels kernels) {
  const int64_t n = s.B * s.H * s.Tq;
  if (n == 0) return;
  if (kernels == AttnKernels::Fastest && attention_tiled_fits(s, {q, k, v, o}))
    return attention_fwd_tiled(ctx, s, q, k, v, key_mask, o, lse);
  fwd_queries<<<grid_blocks(n, kAttnThreads), kAttnThreads, 0, ctx.stream()>>>(s, q, k, v, key_mask, o, lse);
  check(cudaGetLastError(), ctx.index(), "attention forward launch");
}

void attention_bwd(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* delta,
                   float* dq, float* dk, float* dv, AttnKernels kernels) {
  const int64_t nq = s.B * s.H * s.Tq, nk = s.B * s.Hkv * s.Tk;
  if (nq == 0) return;
  if (kernels == AttnKernels::Fastest && attention_tiled_fits(s, {q, k, v, o, dout, dq, dk, dv}))
    return attention_bwd_tiled(ctx, s, q, k, v, key_mask, o, lse, dout, delta, dq, dk, dv);
  delta_queries<<<grid_blocks(nq, kThreads), kThreads, 0, ctx.stream()>>>(s, o, dout, delta);
  dq_queries<<<grid_blocks(nq, kAttnThreads), kAttnThreads, 0, ctx.stream()>>>(s, q, k, v, key_mask, lse, delta, dout,
                                                                              dq);
  dkv_keys<<<grid_blocks(nk, kAttnThreads), kAttnThreads, 0, ctx.stream()>>>(s, q, k, v, key_mask, lse, delta, dout,
                                                                            dk, dv);
  check(cudaGetLastError(), ctx.index(), "attention backward launch");
}

}  // namespace ar::cuda
