// fp32 <-> bf16 conversion of GEMM operands. Layout: n contiguous elements, bf16 as uint16_t.
// Math (PyTorch's c10::BFloat16 round_to_nearest_even, the scalar ar::f32_to_bf16 of core/dtype.h):
//   NaN (|u| > 0x7f800000): (u >> 16) | 0x0040 (quiet, sign and top payload kept);
//   otherwise (u + 0x7fff + ((u >> 16) & 1)) >> 16: ties to even, subnormals rounded like any value
//   (no flush to zero), overflow carries into the exponent and gives +-inf.
// The AVX-512 path does the same integer arithmetic (VCVTNEPS2BF16 is not used: it treats subnormal
// inputs as zero). bf16 -> fp32 is a 16-bit shift (exact).
// Reference: ar::f32_to_bf16 / ar::bf16_to_f32, element by element (tests/test_kernels_bf16.cpp).
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/cpu/bf16_ops.h"

namespace ar::cpu {

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {
constexpr int64_t kGrain = int64_t(1) << 16;  // elements per chunk: memory-bound, keep wake-ups rare

__attribute__((target("avx512f"))) void to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q)));
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

__attribute__((target("avx512f"))) void to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void fp32_to_bf16_serial(const float* src, uint16_t* dst, int64_t n, bool avx512) {
  if (avx512) return to_bf16_avx512(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void fp32_to_bf16(Context& ctx, const float* src, uint16_t* dst, int64_t n) {
  const bool simd = cpu_isa().avx512;
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) { fp32_to_bf16_serial(src + i0, dst + i0, i1 - i0, simd); },
                          kGrain);
}

void bf16_to_fp32(Context& ctx, const uint16_t* src, float* dst, int64_t n) {
  const bool simd = cpu_isa().avx512;
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    if (simd) return to_f32_avx512(src + i0, dst + i0, i1 - i0);
    for (int64_t i = i0; i < i1; ++i) dst[i] = bf16_to_f32(src[i]);
  }, kGrain);
}

}  // namespace ar::cpu
