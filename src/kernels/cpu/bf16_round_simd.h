// fp32 -> bf16 rounding of a vector of fp32 bit patterns, as 32-bit lanes whose low 16 bits are the
// bf16 (ar::f32_to_bf16 of core/dtype.h lane by lane: ties to even, subnormals kept, NaN quieted).
// For the kernels that produce bf16 GEMM operands (bf16_convert.cpp, quant/qdq_fwd_simd.cpp);
// VCVTNEPS2BF16 is not used: it treats subnormal inputs as zero.
#pragma once
#include <immintrin.h>

namespace ar::cpu {

__attribute__((target("avx512f"))) inline __m512i bf16_round16_avx512(__m512i u) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet);
  return _mm512_mask_mov_epi32(r, nan, q);
}

// Signed compares suffice: |u| <= 0x7fffffff.
__attribute__((target("avx2"))) inline __m256i bf16_round8_avx2(__m256i u) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
  return _mm256_blendv_epi8(r, q, nan);
}

// Sixteen bf16 from two rounded halves (packus works within 128-bit lanes; values <= 0xffff do not
// saturate): the permute restores the order.
__attribute__((target("avx2"))) inline __m256i bf16_pack16_avx2(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
}

}  // namespace ar::cpu
