// The machine's arithmetic limits, measured in the same run as a benchmark: tight loops of independent
// FMAs at the process's ISA level (AVX-512: 16 lanes; AVX2: 8 lanes; kernels/cpu/isa.h, so a run
// under AR_CPU_ISA=avx2 measures the AVX2 peak its kernels can reach) and of VDPBF16PS (bf16 dot
// products) on every thread of a context. The bf16 limit is twice the fp32 peak (VDPBF16PS does two
// multiply-adds per fp32 lane).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/context.h"
#include "kernels/cpu/isa.h"

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

// AVX2 has 16 YMM registers: 12 accumulators and the two operands stay in registers (16 would spill
// and measure the loads); 12 still covers FMA latency x pipes (4 x 2 on Zen 3 and Intel cores).
constexpr int kAccAvx2 = 12;
__attribute__((target("avx2,fma"), noinline)) inline float fma_loop_avx2(int64_t iters) {
  __m256 acc[kAccAvx2];
  for (int j = 0; j < kAccAvx2; ++j) acc[j] = _mm256_set1_ps(float(j));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kAccAvx2; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  __m256 s = acc[0];
  for (int j = 1; j < kAccAvx2; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float x[8];
  _mm256_store_ps(x, s);
  float t = 0;
  for (float e : x) t += e;
  return t;
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

// fp32 FMA peak of all of ctx's threads at the process's ISA level, GFLOP/s (best of 3 runs of
// `iters` loop iterations); 0 below AVX2 (no FMA in the scalar level's kernels to compare with).
inline double fp32_peak_gflops(Context& ctx, int64_t iters = 100000000) {
  if (cpu::kernel_isa() >= cpu::Isa::avx512) return loop_peak(ctx, fma_loop, kAcc * 16 * 2, iters);
  if (cpu::kernel_isa() >= cpu::Isa::avx2) return loop_peak(ctx, fma_loop_avx2, kAccAvx2 * 8 * 2, iters);
  return 0.0;
}
// The vector width of that peak, for logs.
inline const char* fp32_peak_isa() {
  return cpu::kernel_isa() >= cpu::Isa::avx512 ? "avx512" : cpu::kernel_isa() >= cpu::Isa::avx2 ? "avx2" : "none";
}
// VDPBF16PS loop, GFLOP/s (0 without AVX512_BF16).
inline double dpbf16_peak_gflops(Context& ctx, bool has_bf16, int64_t iters = 100000000) {
  return has_bf16 ? loop_peak(ctx, dpbf16_loop, kAcc * 16 * 4, iters) : 0.0;
}

}  // namespace ar::bench
