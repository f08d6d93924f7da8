// exp(x) in fp32 over arrays, 16 lanes at a time on AVX-512, 8 on AVX2 and one at a time elsewhere,
// with the same arithmetic on every path (every step a correctly rounded IEEE operation), so an element's bits do not
// depend on which path or which chunk of a parallel loop computed it:
//   x clamped to [-104, 89] (exp is 0 resp. inf in fp32 beyond), n = nearbyint(x log2(e)),
//   r = x - n ln2 (ln2 in two parts, fma), p = degree-7 Taylor polynomial of e^r (Horner, fma; |r| <=
//   0.35, truncation error < 2^-27 relative), result p 2^n (scalef / ldexp: one rounding, overflow to
//   inf handled; AVX2 has no scalef: p 2^(n>>1) is exact and normal for every n the clamp allows, and
//   times 2^(n - (n>>1)) rounds once, as ldexp does), a result below FLT_MIN flushed to 0 by an explicit
//   compare (so every path gives 0 there whatever the thread's MXCSR: core/float_mode.h); NaN passes
//   through. Accuracy: within 2 ulp of exp for every finite input whose exp is at least FLT_MIN
//   (tests/test_exp.cpp checks against the double exp over the whole range).
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/avx512_headers.h"

namespace ar::cpu {

namespace {
constexpr float kLo = -104.f, kHi = 89.f, kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723212e-6f;
constexpr float kMinNormal = 1.17549435e-38f;  // FLT_MIN: smaller results are flushed to 0
constexpr float kC[8] = {1.f, 1.f, 1.f / 2, 1.f / 6, 1.f / 24, 1.f / 120, 1.f / 720, 1.f / 5040};

float exp_one(float x) {
  if (std::isnan(x)) return x;
  x = std::fmin(std::fmax(x, kLo), kHi);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kC[7];
  for (int k = 6; k >= 0; --k) p = std::fma(p, r, kC[k]);
  const float y = std::ldexp(p, int(n));
  return y < kMinNormal ? 0.f : y;
}

AR_AVX512_HEADERS_BEGIN
// 16 lanes of exp_one (NaN lanes pass through).
__attribute__((target("avx512f"))) inline __m512 exp16_avx512(__m512 v) {
  const __m512 c = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(kLo)), _mm512_set1_ps(kHi));
  const __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-kLn2Hi), c);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kC[7]);
  for (int j = 6; j >= 0; --j) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC[j]));
  const __m512 y = _mm512_scalef_ps(p, k);
  const __m512 y0 = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, _mm512_set1_ps(kMinNormal), _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mask_mov_ps(y0, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

__attribute__((target("avx512f"))) void exp_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp16_avx512(_mm512_loadu_ps(x + i)));
  if (i < n) {  // the tail under a lane mask
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, exp16_avx512(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
AR_AVX512_HEADERS_END

// 2^e for integer lanes e in [-126, 127].
__attribute__((target("avx2"))) inline __m256 pow2_avx2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

// 8 lanes of exp_one (NaN lanes pass through).
__attribute__((target("avx2,fma"))) inline __m256 exp8_avx2(__m256 v) {
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(kLo)), _mm256_set1_ps(kHi));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-kLn2Hi), c);
  r = _mm256_fmadd_ps(k, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kC[7]);
  for (int j = 6; j >= 0; --j) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC[j]));
  const __m256i n = _mm256_cvtps_epi32(k), n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow2_avx2(n1)), pow2_avx2(n2));
  const __m256 y0 = _mm256_andnot_ps(_mm256_cmp_ps(y, _mm256_set1_ps(kMinNormal), _CMP_LT_OQ), y);
  return _mm256_blendv_ps(y0, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

__attribute__((target("avx2,fma"))) void exp_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8_avx2(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail under a lane mask
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(x + i, m, exp8_avx2(_mm256_maskload_ps(x + i, m)));
  }
}
}  // namespace

void exp_inplace(float* x, int64_t n, Isa isa) {
  if (isa >= Isa::avx512) return exp_avx512(x, n);
  if (isa >= Isa::avx2) return exp_avx2(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = exp_one(x[i]);
}

void exp_inplace(float* x, int64_t n) { exp_inplace(x, n, kernel_isa()); }

}  // namespace ar::cpu
