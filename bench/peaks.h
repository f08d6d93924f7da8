// The machine's arithmetic limits, measured in the same run as a benchmark: tight loops of independent
// AVX-512 FMAs (the fp32 peak) and of VDPBF16PS (bf16 dot products) on every thread of a context.
// The bf16 limit is twice the fp32 peak (VDPBF16PS does two multiply-adds per fp32 lane).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/context.h"

namespace ar::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kAcc = 16;  // independent accumulators: > FMA latency x pipes on current cores

__attribute__((target("avx512f"))) inline float sum16(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float s = 0;
  for (float e : x) s += e;
  return s;
}

__attribute__((target("avx512f"), noinline)) inline float fma_loop(int64_t iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  __m512 s = acc[0];
  for (int j = 1; j < kAcc; ++j) s = _mm512_add_ps(s, acc[j]);
  return sum16(s);
}

__attribute__((target("avx512f,avx512bf16"), noinline)) inline float dpbf16_loop(int64_t iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3a83), y = (__m512bh)_mm512_set1_epi16(0x3a83);  // ~1e-3
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
  __m512 s = acc[0];
  for (int j = 1; j < kAcc; ++j) s = _mm512_add_ps(s, acc[j]);
  return sum16(s);
}

// GFLOP/s of `loop` on every thread of ctx at once (flops per iteration per thread given); best of 3.
inline double loop_peak(Context& ctx, float (*loop)(int64_t), double flops_per_iter, int64_t iters) {
  double best = 0;
  std::vector<float> sink(size_t(ctx.threads()));
  for (int r = 0; r < 3; ++r) {
    const double t0 = now_s();
    ctx.pool().parallel_for(ctx.threads(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sink[size_t(i)] = loop(iters);
    }, 1);
    best = std::max(best, flops_per_iter * double(iters) * ctx.threads() / (now_s() - t0) / 1e9);
  }
  if (sink[0] == 12345.f) std::printf(" ");  // keep the results alive
  return best;
}

// fp32 FMA peak of all of ctx's threads, GFLOP/s (best of 3 runs of `iters` loop iterations).
inline double fp32_peak_gflops(Context& ctx, int64_t iters = 100000000) {
  return loop_peak(ctx, fma_loop, kAcc * 16 * 2, iters);
}
// VDPBF16PS loop, GFLOP/s (0 without AVX512_BF16).
inline double dpbf16_peak_gflops(Context& ctx, bool has_bf16, int64_t iters = 100000000) {
  return has_bf16 ? loop_peak(ctx, dpbf16_loop, kAcc * 16 * 4, iters) : 0.0;
}

}  // namespace ar::bench
