// fp32 <-> bf16 conversion of GEMM operands. Layout: n contiguous elements, bf16 as uint16_t.
// Math (PyTorch's c10::BFloat16 round_to_nearest_even, the scalar ar::f32_to_bf16 of core/dtype.h):
//   NaN (|u| > 0x7f800000): (u >> 16) | 0x0040 (quiet, sign and top payload kept);
//   otherwise (u + 0x7fff + ((u >> 16) & 1)) >> 16: ties to even, subnormals rounded like any value
//   (no flush to zero), overflow carries into the exponent and gives +-inf.
// The AVX-512 and AVX2 paths do the same integer arithmetic (VCVTNEPS2BF16 is not used: it treats
// subnormal inputs as zero). bf16 -> fp32 is a 16-bit shift (exact).
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

// 8 lanes of the rounding above, as 32-bit integers (signed compares: |u| <= 0x7fffffff).
__attribute__((target("avx2"))) inline __m256i round8_avx2(__m256i u) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
  return _mm256_blendv_epi8(r, q, nan);
}

__attribute__((target("avx2"))) void to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = round8_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = round8_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works within 128-bit halves (values are <= 0xffff, no saturation): restore the order
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

__attribute__((target("avx2"))) void to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void fp32_to_bf16_serial(const float* src, uint16_t* dst, int64_t n, Isa isa) {
  if (isa >= Isa::avx512) return to_bf16_avx512(src, dst, n);
  if (isa >= Isa::avx2) return to_bf16_avx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void bf16_to_fp32_serial(const uint16_t* src, float* dst, int64_t n, Isa isa) {
  if (isa >= Isa::avx512) return to_f32_avx512(src, dst, n);
  if (isa >= Isa::avx2) return to_f32_avx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void fp32_to_bf16(Context& ctx, const float* src, uint16_t* dst, int64_t n) {
  const Isa isa = kernel_isa();
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) { fp32_to_bf16_serial(src + i0, dst + i0, i1 - i0, isa); },
                          kGrain);
}

void bf16_to_fp32(Context& ctx, const uint16_t* src, float* dst, int64_t n) {
  const Isa isa = kernel_isa();
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) { bf16_to_fp32_serial(src + i0, dst + i0, i1 - i0, isa); },
                          kGrain);
}

}  // namespace ar::cpu
