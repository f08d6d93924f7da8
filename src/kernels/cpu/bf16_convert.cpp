// fp32 <-> bf16 conversion of GEMM operands. Layout: n contiguous elements, bf16 as uint16_t.
// Math (PyTorch's c10::BFloat16 round_to_nearest_even, the scalar ar::f32_to_bf16 of core/dtype.h):
//   NaN (|u| > 0x7f800000): (u >> 16) | 0x0040 (quiet, sign and top payload kept);
//   otherwise (u + 0x7fff + ((u >> 16) & 1)) >> 16: ties to even, subnormals rounded like any value
//   (no flush to zero), overflow carries into the exponent and gives +-inf.
// The AVX-512 and AVX2 paths do the same integer arithmetic (bf16_round_simd.h). bf16 -> fp32 is a
// 16-bit shift (exact).
// Reference: ar::f32_to_bf16 / ar::bf16_to_f32, element by element (tests/test_kernels_bf16.cpp).
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/bf16_round_simd.h"
#include "kernels/cpu/avx512_headers.h"

namespace ar::cpu {

AR_AVX512_HEADERS_BEGIN

namespace {
constexpr int64_t kGrain = int64_t(1) << 16;  // elements per chunk: memory-bound, keep wake-ups rare

__attribute__((target("avx512f"))) void to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = bf16_round16_avx512(_mm512_loadu_si512(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
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

__attribute__((target("avx2"))) void to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = bf16_round8_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = bf16_round8_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_pack16_avx2(lo, hi));
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

AR_AVX512_HEADERS_END

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
