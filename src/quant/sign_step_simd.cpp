// SignRound's step over an array on the CPU: quant/sign_step.h's sign_step_value (and coef_step_value
// for the min/max coefficients) 16 lanes at a time on AVX-512, 8 on AVX2, else one at a time, with the
// same bits: sign(d) is formed as the scalar forms it ((d > 0) - (d < 0) as a float, +0 for a zero or
// NaN d), rate * sign(d) is exact, and the [0, 1] clamp is an ordered min/max (max(0, min(1, p)) equals
// p < 0 ? 0 : p > 1 ? 1 : p on every input). Why: the scalar loop took about 7% of a mixture-of-experts
// iteration (docs/benchmarks.md, "The QDQ forward and the sign step").
#include "quant/sign_step_simd.h"

#include <immintrin.h>

#include <cmath>

#include "quant/sign_step.h"
#include "kernels/cpu/avx512_headers.h"

namespace ar::quant {

namespace {

AR_AVX512_HEADERS_BEGIN
__attribute__((target("avx512f"))) int64_t step_avx512(float* p, const float* d, int64_t n, float rate, bool coef,
                                                       bool& ok) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.f), r = _mm512_set1_ps(rate),
               inf = _mm512_set1_ps(INFINITY);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __mmask16 finite = 0xffff;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(d + i);
    finite &= _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(g), abs_mask)), inf, _CMP_LT_OQ);
    const __m512 sg = _mm512_sub_ps(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(g, zero, _CMP_GT_OQ), one),
                                    _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(g, zero, _CMP_LT_OQ), one));
    __m512 v = _mm512_sub_ps(_mm512_loadu_ps(p + i), _mm512_mul_ps(r, sg));
    if (coef) v = _mm512_max_ps(zero, _mm512_min_ps(one, v));
    _mm512_storeu_ps(p + i, v);
  }
  ok &= finite == 0xffff;
  return i;
}
AR_AVX512_HEADERS_END

__attribute__((target("avx2"))) int64_t step_avx2(float* p, const float* d, int64_t n, float rate, bool coef,
                                                  bool& ok) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.f), r = _mm256_set1_ps(rate),
               inf = _mm256_set1_ps(INFINITY), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(d + i);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_and_ps(g, abs_mask), inf, _CMP_LT_OQ));
    const __m256 sg = _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(g, zero, _CMP_GT_OQ), one),
                                    _mm256_and_ps(_mm256_cmp_ps(g, zero, _CMP_LT_OQ), one));
    __m256 v = _mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_mul_ps(r, sg));
    if (coef) v = _mm256_max_ps(zero, _mm256_min_ps(one, v));
    _mm256_storeu_ps(p + i, v);
  }
  ok &= _mm256_movemask_ps(finite) == 0xff;
  return i;
}

}  // namespace

bool sign_step_array(float* p, const float* d, int64_t n, float rate, bool coef, cpu::Isa isa) {
  bool ok = true;
  int64_t i = 0;
  if (isa >= cpu::Isa::avx512) i = step_avx512(p, d, n, rate, coef, ok);
  else if (isa >= cpu::Isa::avx2) i = step_avx2(p, d, n, rate, coef, ok);
  for (; i < n; ++i) {
    ok &= std::isfinite(d[i]);
    p[i] = coef ? coef_step_value(p[i], d[i], rate) : sign_step_value(p[i], d[i], rate);
  }
  return ok;
}

}  // namespace ar::quant
