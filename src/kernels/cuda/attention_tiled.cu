// Causal GQA attention with a key mask, forward and backward, tiled for the GPU's fp32 cores: the
// flash-attention scheme (online softmax, nothing of size T x T in memory) with no atomics, so every output
// is written by one group of threads in a fixed order (the same bits on every run).
//
// A row (a query, or a key in dK/dV) belongs to a group of 4 consecutive threads of one warp; thread g of
// the group holds float4 chunks g, g + 4, g + 8, ... of the row in registers, so the group's reads of a
// staged row hit 4 different banks and its dot products need two shuffles. A block holds 32 rows and
// stages the other side in tiles of 32 rows (K and V for queries, Q and dO for keys) in shared memory.
//   forward  per query: scores by an online max/sum, o = sum p v / sum p, lse = max + log(sum)
//   dq       per query: delta = dO . o (also written for dkv), dq = scale sum_j p (dO . v_j - delta) k_j
//   dkv      per key of a kv head: sums over the group's query heads and the queries that see the key
// Semantics as kernels/ref/attention_ref.h (lse of a query that sees no key is -inf, its o and dq are 0).
#include "kernels/cuda/attention_tiled.h"

#include <cmath>
#include <type_traits>

namespace ar::cuda {

namespace {

constexpr int kGroup = 4;                      // threads per row
constexpr int kRows = 32;                      // rows per block
constexpr int kTile = 32;                      // rows of the other side staged per step
constexpr int kBlock = kRows * kGroup;         // threads per block
constexpr int kMaxChunks = 8;                  // float4 chunks per thread: D <= 128

// The sum over the row's group; every thread of the group gets the same bits (x + y == y + x).
__device__ __forceinline__ float group_sum(float x, unsigned mask) {
  x += __shfl_xor_sync(mask, x, 1, kGroup);
  x += __shfl_xor_sync(mask, x, 2, kGroup);
  return x;
}

template <int NC>
__device__ __forceinline__ void load_row(float4 (&r)[NC], const float* row, int g) {
  const float4* p = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int e = 0; e < NC; ++e) r[e] = p[g + kGroup * e];
}

template <int NC>
__device__ __forceinline__ void store_row(float* row, const float4 (&r)[NC], float mul, int g) {
  float4* p = reinterpret_cast<float4*>(row);
#pragma unroll
  for (int e = 0; e < NC; ++e) p[g + kGroup * e] = make_float4(r[e].x * mul, r[e].y * mul, r[e].z * mul, r[e].w * mul);
}

template <int NC>
__device__ __forceinline__ void zero_row(float4 (&r)[NC]) {
#pragma unroll
  for (int e = 0; e < NC; ++e) r[e] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// This thread's part of a . row (row: 4 * NC float4 chunks, in shared or global memory).
template <int NC>
__device__ __forceinline__ float dot_part(const float4 (&a)[NC], const float4* row, int g) {
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int e = 0; e < NC; ++e) {
    const float4 b = row[g + kGroup * e];
    s0 = fmaf(a[e].x, b.x, s0);
    s1 = fmaf(a[e].y, b.y, s1);
    s0 = fmaf(a[e].z, b.z, s0);
    s1 = fmaf(a[e].w, b.w, s1);
  }
  return s0 + s1;
}

// acc = acc * c + p * row (c == 1: acc += p * row).
template <int NC>
__device__ __forceinline__ void axpy(float4 (&acc)[NC], float p, const float4* row, int g) {
#pragma unroll
  for (int e = 0; e < NC; ++e) {
    const float4 b = row[g + kGroup * e];
    acc[e].x = fmaf(p, b.x, acc[e].x);
    acc[e].y = fmaf(p, b.y, acc[e].y);
    acc[e].z = fmaf(p, b.z, acc[e].z);
    acc[e].w = fmaf(p, b.w, acc[e].w);
  }
}

template <int NC>
__device__ __forceinline__ void rescale_add(float4 (&acc)[NC], float c, const float4* row, int g) {
#pragma unroll
  for (int e = 0; e < NC; ++e) {
    const float4 b = row[g + kGroup * e];
    acc[e].x = fmaf(acc[e].x, c, b.x);
    acc[e].y = fmaf(acc[e].y, c, b.y);
    acc[e].z = fmaf(acc[e].z, c, b.z);
    acc[e].w = fmaf(acc[e].w, c, b.w);
  }
}

// Stages rows first .. first + kTile - 1 (those below `end`) of a [B, T, heads, D] tensor at (b, head) into
// dst (kTile x 4 NC float4), zeros past the end.
template <int NC>
__device__ __forceinline__ void stage(float4* dst, const float* src, int64_t b, int64_t T, int64_t heads,
                                      int64_t head, int64_t first, int64_t end) {
  constexpr int RW = 4 * NC;
  for (int u = threadIdx.x; u < kTile * RW; u += kBlock) {
    const int r = u / RW, c = u % RW;
    const int64_t t = first + r;
    dst[u] = t < end ? reinterpret_cast<const float4*>(src + ((b * T + t) * heads + head) * RW * 4)[c]
                     : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// Where a thread of the queries' kernels (forward, dq) stands: batch b, query head h and its kv head hk,
// the offset of causal visibility (query i sees key j when j <= i + off), its query i (the block's first:
// i0) and whether it exists, its part g of the row's group and the group's shuffle mask, and the end of
// the keys any query of the block sees (kv_end).
struct QueryThread {
  int64_t b, h, hk, off, i0, i, kv_end;
  int g;
  unsigned mask;
  bool row_ok;
};
__device__ __forceinline__ QueryThread query_thread(const ref::AttnShape& s) {
  QueryThread t;
  t.b = blockIdx.z;
  t.h = blockIdx.y;
  t.hk = t.h / (s.H / s.Hkv);
  t.off = s.Tk - s.Tq;
  t.g = int(threadIdx.x) % kGroup;
  t.mask = 0xFu << (threadIdx.x & 28);
  t.i0 = int64_t(blockIdx.x) * kRows;
  t.i = t.i0 + int64_t(threadIdx.x) / kGroup;
  t.row_ok = t.i < s.Tq;
  t.kv_end = min(s.Tk, min(s.Tq - 1, t.i0 + kRows - 1) + t.off + 1);
  return t;
}

// Keys j0 .. j0 + kTile - 1 of kv head hk (those below kv_end) staged for the queries' kernels: K and V
// rows, and whether each key is visible at all (below kv_end and not masked). Opens with the barrier
// that ends the previous tile's use and closes with the one that publishes this tile.
template <int NC>
__device__ __forceinline__ void stage_keys(float4* Ks, float4* Vs, uint8_t* Ms, const ref::AttnShape& s, const float* k,
                                           const float* v, const uint8_t* key_mask, int64_t b, int64_t hk,
                                           int64_t j0, int64_t kv_end) {
  __syncthreads();
  stage<NC>(Ks, k, b, s.Tk, s.Hkv, hk, j0, kv_end);
  stage<NC>(Vs, v, b, s.Tk, s.Hkv, hk, j0, kv_end);
  if (threadIdx.x < kTile) {
    const int64_t j = j0 + threadIdx.x;
    Ms[threadIdx.x] = j < kv_end && (!key_mask || key_mask[b * s.Tk + j]);
  }
  __syncthreads();
}

template <int NC>
__global__ void __launch_bounds__(kBlock) fwd_tiled(ref::AttnShape s, float scale, const float* q, const float* k,
                                                    const float* v, const uint8_t* key_mask, float* o, float* lse) {
  constexpr int RW = 4 * NC;
  __shared__ float4 Ks[kTile * RW], Vs[kTile * RW];
  __shared__ uint8_t Ms[kTile];
  const auto [b, h, hk, off, i0, i, kv_end, g, mask, row_ok] = query_thread(s);
  float4 qr[NC], acc[NC];
  zero_row(qr);
  zero_row(acc);
  if (row_ok) load_row(qr, q + ((b * s.Tq + i) * s.H + h) * s.D, g);
  float m = -INFINITY, l = 0.f;
  for (int64_t j0 = 0; j0 < kv_end; j0 += kTile) {
    stage_keys<NC>(Ks, Vs, Ms, s, k, v, key_mask, b, hk, j0, kv_end);
    if (!row_ok) continue;
    const int n = int(min(int64_t(kTile), kv_end - j0));
    for (int jj = 0; jj < n; ++jj) {
      if (j0 + jj > i + off) break;  // causal: no later key is visible either
      if (!Ms[jj]) continue;
      const float sc = group_sum(dot_part(qr, Ks + jj * RW, g), mask) * scale;
      if (sc > m) {  // a new maximum: rescale what was summed (to 0 at the first visible key)
        const float c = expf(m - sc);
        l = fmaf(l, c, 1.f);
        rescale_add(acc, c, Vs + jj * RW, g);
        m = sc;
      } else {
        const float p = expf(sc - m);
        l += p;
        axpy(acc, p, Vs + jj * RW, g);
      }
    }
  }
  if (!row_ok) return;
  store_row(o + ((b * s.Tq + i) * s.H + h) * s.D, acc, l > 0.f ? 1.f / l : 0.f, g);
  if (g == 0) lse[(b * s.H + h) * s.Tq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

template <int NC>
__global__ void __launch_bounds__(kBlock) dq_tiled(ref::AttnShape s, float scale, const float* q, const float* k,
                                                   const float* v, const uint8_t* key_mask, const float* o,
                                                   const float* lse, const float* dout, float* delta, float* dq) {
  constexpr int RW = 4 * NC;
  __shared__ float4 Ks[kTile * RW], Vs[kTile * RW];
  __shared__ uint8_t Ms[kTile];
  const auto [b, h, hk, off, i0, i, kv_end, g, mask, row_ok] = query_thread(s);
  const int64_t qo = ((b * s.Tq + i) * s.H + h) * s.D, row = (b * s.H + h) * s.Tq + i;
  float4 qr[NC], dor[NC], acc[NC];
  zero_row(qr);
  zero_row(dor);
  zero_row(acc);
  float l = -INFINITY, di = 0.f;
  if (row_ok) {
    load_row(qr, q + qo, g);
    load_row(dor, dout + qo, g);
    di = group_sum(dot_part(dor, reinterpret_cast<const float4*>(o + qo), g), mask);
    if (g == 0) delta[row] = di;
    l = lse[row];
  }
  const bool live = row_ok && l != -INFINITY;
  for (int64_t j0 = 0; j0 < kv_end; j0 += kTile) {
    stage_keys<NC>(Ks, Vs, Ms, s, k, v, key_mask, b, hk, j0, kv_end);
    if (!live) continue;
    const int n = int(min(int64_t(kTile), kv_end - j0));
    for (int jj = 0; jj < n; ++jj) {
      if (j0 + jj > i + off) break;
      if (!Ms[jj]) continue;
      const float p = expf(group_sum(dot_part(qr, Ks + jj * RW, g), mask) * scale - l);
      const float ds = p * (group_sum(dot_part(dor, Vs + jj * RW, g), mask) - di);
      axpy(acc, scale * ds, Ks + jj * RW, g);
    }
  }
  if (row_ok) store_row(dq + qo, acc, 1.f, g);
}

template <int NC>
__global__ void __launch_bounds__(kBlock) dkv_tiled(ref::AttnShape s, float scale, const float* q, const float* k,
                                                    const float* v, const uint8_t* key_mask, const float* lse,
                                                    const float* delta, const float* dout, float* dk, float* dv) {
  constexpr int RW = 4 * NC;
  __shared__ float4 Qs[kTile * RW], Os[kTile * RW];
  __shared__ float Ls[kTile], Ds[kTile];
  const int64_t b = blockIdx.z, hk = blockIdx.y, grp = s.H / s.Hkv, off = s.Tk - s.Tq;
  const int g = int(threadIdx.x) % kGroup;
  const unsigned mask = 0xFu << (threadIdx.x & 28);
  const int64_t j0 = int64_t(blockIdx.x) * kRows, j = j0 + int64_t(threadIdx.x) / kGroup;
  const int64_t ko = ((b * s.Tk + j) * s.Hkv + hk) * s.D;
  const bool row_ok = j < s.Tk, live = row_ok && (!key_mask || key_mask[b * s.Tk + j]);
  float4 kr[NC], vr[NC], dka[NC], dva[NC];
  zero_row(kr);
  zero_row(vr);
  zero_row(dka);
  zero_row(dva);
  if (row_ok) {
    load_row(kr, k + ko, g);
    load_row(vr, v + ko, g);
  }
  const int64_t i_start = max(int64_t(0), j0 - off);  // the first query that sees the block's first key
  for (int64_t h = hk * grp; h < (hk + 1) * grp; ++h)
    for (int64_t i0 = i_start; i0 < s.Tq; i0 += kTile) {
      __syncthreads();
      stage<NC>(Qs, q, b, s.Tq, s.H, h, i0, s.Tq);
      stage<NC>(Os, dout, b, s.Tq, s.H, h, i0, s.Tq);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        Ls[threadIdx.x] = i < s.Tq ? lse[(b * s.H + h) * s.Tq + i] : -INFINITY;
        Ds[threadIdx.x] = i < s.Tq ? delta[(b * s.H + h) * s.Tq + i] : 0.f;
      }
      __syncthreads();
      if (!live) continue;
      const int n = int(min(int64_t(kTile), s.Tq - i0));
      for (int ii = int(max(int64_t(0), min(int64_t(n), j - off - i0))); ii < n; ++ii) {  // queries i >= j - off
        const float l = Ls[ii];
        if (l == -INFINITY) continue;
        const float p = expf(group_sum(dot_part(kr, Qs + ii * RW, g), mask) * scale - l);
        const float ds = p * (group_sum(dot_part(vr, Os + ii * RW, g), mask) - Ds[ii]);
        axpy(dva, p, Os + ii * RW, g);
        axpy(dka, scale * ds, Qs + ii * RW, g);
      }
    }
  if (!row_ok) return;
  store_row(dk + ko, dka, 1.f, g);
  store_row(dv + ko, dva, 1.f, g);
}

dim3 grid(int64_t rows, int64_t heads, int64_t batch) {
  return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(heads), unsigned(batch));
}

template <int NC>
void fwd(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
         const uint8_t* key_mask, float* o, float* lse) {
  fwd_tiled<NC><<<grid(s.Tq, s.H, s.B), kBlock, 0, ctx.stream()>>>(s, ref::softmax_scale<float>(s), q, k, v, key_mask,
                                                                    o, lse);
}

template <int NC>
void bwd(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
         const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* delta, float* dq,
         float* dk, float* dv) {
  const float scale = ref::softmax_scale<float>(s);
  dq_tiled<NC><<<grid(s.Tq, s.H, s.B), kBlock, 0, ctx.stream()>>>(s, scale, q, k, v, key_mask, o, lse, dout, delta,
                                                                   dq);
  dkv_tiled<NC><<<grid(s.Tk, s.Hkv, s.B), kBlock, 0, ctx.stream()>>>(s, scale, q, k, v, key_mask, lse, delta, dout,
                                                                      dk, dv);
}

template <class F>
void by_chunks(int64_t D, F&& f) {
  switch (D / 16) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, kMaxChunks>{}); break;
  }
}

}  // namespace

bool attention_tiled_fits(const ref::AttnShape& s, std::initializer_list<const void*> ptrs) {
  if (s.D % 16 != 0 || s.D < 16 || s.D > 16 * kMaxChunks || s.Hkv <= 0 || s.H % s.Hkv != 0) return false;
  if (s.window > 0) return false;  // the per-unit kernels (attention_units.h) run sliding windows
  if (s.B > 65535 || s.H > 65535) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

void attention_fwd_tiled(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                         const uint8_t* key_mask, float* o, float* lse) {
  by_chunks(s.D, [&](auto nc) { fwd<decltype(nc)::value>(ctx, s, q, k, v, key_mask, o, lse); });
  check(cudaGetLastError(), ctx.index(), "attention forward launch");
}

void attention_bwd_tiled(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                         const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* delta,
                         float* dq, float* dk, float* dv) {
  by_chunks(s.D, [&](auto nc) { bwd<decltype(nc)::value>(ctx, s, q, k, v, key_mask, o, lse, dout, delta, dq, dk, dv); });
  check(cudaGetLastError(), ctx.index(), "attention backward launch");
}

}  // namespace ar::cuda
