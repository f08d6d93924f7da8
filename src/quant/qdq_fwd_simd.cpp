// The fp32 QDQ forward 16 columns at a time on AVX-512, 8 on AVX2, with qdq_ref.h's qdq_value step for
// step (IEEE division, round to nearest even, the code clamp as ordered min/max, w^ = s (q - z)), and
// the --amp output rounded to bf16 as ar::f32_to_bf16 rounds it (kernels/cpu/bf16_round_simd.h): a
// group's bits equal the scalar template's on every level. Groups' scales stay scalar (group_scale);
// a group's last columns short of a whole vector take the scalar path.
// Why: the scalar loop ran the --amp QDQ at about 5 cycles per weight, the largest single cost outside
// the GEMMs of a mixture-of-experts iteration (docs/benchmarks.md, "The QDQ forward and the sign step").
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/bf16_round_simd.h"
#include "quant/qdq.h"
#include "kernels/cpu/avx512_headers.h"

namespace ar::quant {

namespace {

AR_AVX512_HEADERS_BEGIN

struct GroupConsts {
  float s, z, lo, hi;  // the group's scale and zero point; the code range
};

// min(hi, q) is q where q is NaN (the second operand wins), so max(lo, min(hi, q)) is the scalar clamp
// q < lo ? lo : q > hi ? hi : q on every input.
__attribute__((target("avx512f"))) inline __m512 qdq16_avx512(const GroupConsts& k, __m512 w, __m512 v) {
  const __m512 s = _mm512_set1_ps(k.s), z = _mm512_set1_ps(k.z);
  const __m512 r = _mm512_roundscale_ps(_mm512_add_ps(_mm512_div_ps(w, s), v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 q = _mm512_max_ps(_mm512_set1_ps(k.lo), _mm512_min_ps(_mm512_set1_ps(k.hi), _mm512_add_ps(r, z)));
  return _mm512_mul_ps(s, _mm512_sub_ps(q, z));
}

// Columns [0, len rounded down to 16) of one group; returns how many it did.
template <class Out>
__attribute__((target("avx512f"))) int64_t group_fwd_avx512(const GroupConsts& k, const float* W, const float* V,
                                                            Out* out, int64_t len) {
  int64_t c = 0;
  for (; c + 16 <= len; c += 16) {
    const __m512 y = qdq16_avx512(k, _mm512_loadu_ps(W + c), V ? _mm512_loadu_ps(V + c) : _mm512_setzero_ps());
    if constexpr (std::is_same_v<Out, float>)
      _mm512_storeu_ps(out + c, y);
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                          _mm512_cvtepi32_epi16(cpu::bf16_round16_avx512(_mm512_castps_si512(y))));
  }
  return c;
}

AR_AVX512_HEADERS_END

__attribute__((target("avx2"))) inline __m256 qdq8_avx2(const GroupConsts& k, __m256 w, __m256 v) {
  const __m256 s = _mm256_set1_ps(k.s), z = _mm256_set1_ps(k.z);
  const __m256 r = _mm256_round_ps(_mm256_add_ps(_mm256_div_ps(w, s), v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 q = _mm256_max_ps(_mm256_set1_ps(k.lo), _mm256_min_ps(_mm256_set1_ps(k.hi), _mm256_add_ps(r, z)));
  return _mm256_mul_ps(s, _mm256_sub_ps(q, z));
}

template <class Out>
__attribute__((target("avx2"))) int64_t group_fwd_avx2(const GroupConsts& k, const float* W, const float* V, Out* out,
                                                       int64_t len) {
  int64_t c = 0;
  for (; c + 8 <= len; c += 8) {
    const __m256 y = qdq8_avx2(k, _mm256_loadu_ps(W + c), V ? _mm256_loadu_ps(V + c) : _mm256_setzero_ps());
    if constexpr (std::is_same_v<Out, float>) {
      _mm256_storeu_ps(out + c, y);
    } else {
      const __m256i r = cpu::bf16_round8_avx2(_mm256_castps_si256(y));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c),
                       _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
  }
  return c;
}

template <class Out>
void fwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
              const float* wmin0, const float* wmax0, Out* What, float* scale, float* zero, int64_t r0, int64_t r1,
              cpu::Isa isa) {
  const int64_t ng = sh.groups(), vw = ng * sh.group;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t k = r * ng + gi, c0 = gi * sh.group, len = std::min(sh.in, c0 + sh.group) - c0;
      const float a = alpha ? clamp01(alpha[k]) : 1.f, b = beta ? clamp01(beta[k]) : 1.f;
      const GroupScale<float> g = group_scale(sh, a, b, wmin0[k], wmax0[k]);
      if (scale) scale[k] = g.s;
      if (zero) zero[k] = g.z;
      const float* w = W + r * sh.in + c0;
      const float* v = V ? V + r * vw + c0 : nullptr;
      Out* o = What + r * sh.in + c0;
      const GroupConsts kc{g.s, g.z, float(sh.qmin()), float(sh.qmax())};
      int64_t c = 0;
      if (isa >= cpu::Isa::avx512) c = group_fwd_avx512(kc, w, v, o, len);
      else if (isa >= cpu::Isa::avx2) c = group_fwd_avx2(kc, w, v, o, len);
      for (; c < len; ++c) store_qdq(o + c, qdq_value(sh, g, w[c], v ? v[c] : 0.f));
    }
}

}  // namespace

void qdq_fwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, float* What, float* scale, float* zero, int64_t r0,
                  int64_t r1, cpu::Isa isa) {
  fwd_rows(sh, W, V, alpha, beta, wmin0, wmax0, What, scale, zero, r0, r1, isa);
}

void qdq_fwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, uint16_t* What, float* scale, float* zero, int64_t r0,
                  int64_t r1, cpu::Isa isa) {
  fwd_rows(sh, W, V, alpha, beta, wmin0, wmax0, What, scale, zero, r0, r1, isa);
}

}  // namespace ar::quant
