// The fp32 QDQ backward 16 columns at a time on AVX-512 (one vector) or AVX2 (two vectors of 8), with
// the arithmetic of qdq_ref.h's group_bwd step for step (IEEE division, round-to-nearest-even, ordered
// compares, fma into partial c mod 16, the same pairwise combination), so a group's bits equal the
// scalar path's on every level. Groups' scales and the alpha / beta gradients stay scalar (qdq_ref.h:
// group_scale, group_grads). Lanes past a group's end are masked: their partials are left untouched.
#include <immintrin.h>

#include "quant/qdq.h"
#include "kernels/cpu/avx512_headers.h"

namespace ar::quant {

namespace {
AR_AVX512_HEADERS_BEGIN
// _mm512_maskz_xor_ps is AVX512DQ; the rest is AVX512F.
__attribute__((target("avx512f,avx512dq"))) void group_bwd_avx512(const QdqShape& sh, const GroupScale<float>& g,
                                                                  const float* W, const float* V, const float* dWhat,
                                                                  float* dV, int64_t len, float& ds, float& dz) {
  const __m512 s = _mm512_set1_ps(g.s), z = _mm512_set1_ps(g.z), lo = _mm512_set1_ps(float(sh.qmin())),
               hi = _mm512_set1_ps(float(sh.qmax())), sign = _mm512_set1_ps(-0.f);
  __m512 ps = _mm512_setzero_ps(), pz = _mm512_setzero_ps();
  for (int64_t c = 0; c < len; c += kQdqLanes) {
    const __mmask16 m = len - c >= kQdqLanes ? __mmask16(0xffff) : __mmask16((1u << (len - c)) - 1);
    const __m512 w = _mm512_maskz_loadu_ps(m, W + c), d = _mm512_maskz_loadu_ps(m, dWhat + c);
    const __m512 v = V ? _mm512_maskz_loadu_ps(m, V + c) : _mm512_setzero_ps();
    const __m512 ws = _mm512_div_ps(w, s);
    const __m512 rq = _mm512_add_ps(_mm512_roundscale_ps(_mm512_add_ps(ws, v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    const __mmask16 in = _mm512_cmp_ps_mask(rq, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(rq, hi, _CMP_LE_OQ);
    const __mmask16 below = _mm512_cmp_ps_mask(rq, lo, _CMP_LT_OQ);
    const __m512 q = _mm512_mask_blend_ps(in, _mm512_mask_blend_ps(below, hi, lo), rq);
    if (dV) _mm512_mask_storeu_ps(dV + c, m, _mm512_maskz_mul_ps(in, d, s));
    const __m512 t = _mm512_add_ps(_mm512_sub_ps(q, z), _mm512_maskz_xor_ps(in, ws, sign));
    ps = _mm512_mask3_fmadd_ps(d, t, ps, m);
    pz = _mm512_mask3_fnmadd_ps(d, s, pz, __mmask16(m & ~in));
  }
  float a[kQdqLanes], b[kQdqLanes];
  _mm512_storeu_ps(a, ps);
  _mm512_storeu_ps(b, pz);
  ds = combine_lanes(a);
  dz = combine_lanes(b);
}
AR_AVX512_HEADERS_END

// Eight columns of group_bwd: m selects the lanes that exist (all ones or zero per lane).
__attribute__((target("avx2,fma"))) inline void lanes8_avx2(__m256 s, __m256 z, __m256 lo, __m256 hi, __m256i m,
                                                            const float* W, const float* V, const float* dWhat,
                                                            float* dV, __m256& ps, __m256& pz) {
  const __m256 mf = _mm256_castsi256_ps(m), sign = _mm256_set1_ps(-0.f);
  const __m256 w = _mm256_maskload_ps(W, m), d = _mm256_maskload_ps(dWhat, m);
  const __m256 v = V ? _mm256_maskload_ps(V, m) : _mm256_setzero_ps();
  const __m256 ws = _mm256_div_ps(w, s);
  const __m256 rq = _mm256_add_ps(_mm256_round_ps(_mm256_add_ps(ws, v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
  const __m256 in = _mm256_and_ps(_mm256_cmp_ps(rq, lo, _CMP_GE_OQ), _mm256_cmp_ps(rq, hi, _CMP_LE_OQ));
  const __m256 below = _mm256_cmp_ps(rq, lo, _CMP_LT_OQ);
  const __m256 q = _mm256_blendv_ps(_mm256_blendv_ps(hi, lo, below), rq, in);
  if (dV) _mm256_maskstore_ps(dV, m, _mm256_and_ps(in, _mm256_mul_ps(d, s)));
  const __m256 t = _mm256_add_ps(_mm256_sub_ps(q, z), _mm256_and_ps(in, _mm256_xor_ps(ws, sign)));
  ps = _mm256_blendv_ps(ps, _mm256_fmadd_ps(d, t, ps), mf);
  pz = _mm256_blendv_ps(pz, _mm256_fnmadd_ps(d, s, pz), _mm256_andnot_ps(in, mf));
}

__attribute__((target("avx2,fma"))) void group_bwd_avx2(const QdqShape& sh, const GroupScale<float>& g, const float* W,
                                                        const float* V, const float* dWhat, float* dV, int64_t len,
                                                        float& ds, float& dz) {
  const __m256 s = _mm256_set1_ps(g.s), z = _mm256_set1_ps(g.z), lo = _mm256_set1_ps(float(sh.qmin())),
               hi = _mm256_set1_ps(float(sh.qmax()));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 ps0 = _mm256_setzero_ps(), pz0 = _mm256_setzero_ps(), ps1 = _mm256_setzero_ps(), pz1 = _mm256_setzero_ps();
  for (int64_t c = 0; c < len; c += kQdqLanes) {
    for (int h = 0; h < 2; ++h) {
      const int64_t c8 = c + 8 * h, left = std::min<int64_t>(8, len - c8);
      if (left <= 0) break;
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left)), lane);
      lanes8_avx2(s, z, lo, hi, m, W + c8, V ? V + c8 : nullptr, dWhat + c8, dV ? dV + c8 : nullptr, h ? ps1 : ps0,
                  h ? pz1 : pz0);
    }
  }
  float a[kQdqLanes], b[kQdqLanes];
  _mm256_storeu_ps(a, ps0);
  _mm256_storeu_ps(a + 8, ps1);
  _mm256_storeu_ps(b, pz0);
  _mm256_storeu_ps(b + 8, pz1);
  ds = combine_lanes(a);
  dz = combine_lanes(b);
}
}  // namespace

void qdq_bwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha, float* dbeta,
                  int64_t r0, int64_t r1, cpu::Isa isa) {
  const int64_t ng = sh.groups(), vw = ng * sh.group;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t k = r * ng + gi, c0 = gi * sh.group, len = std::min(sh.in, c0 + sh.group) - c0;
      const float ar = alpha ? alpha[k] : 1.f, br = beta ? beta[k] : 1.f, a = clamp01(ar);
      const GroupScale<float> g = group_scale(sh, a, clamp01(br), wmin0[k], wmax0[k]);
      const float* w = W + r * sh.in + c0;
      const float* v = V ? V + r * vw + c0 : nullptr;
      const float* d = dWhat + r * sh.in + c0;
      float* dv = dV ? dV + r * vw + c0 : nullptr;
      float ds = 0, dz = 0;
      if (isa >= cpu::Isa::avx512) group_bwd_avx512(sh, g, w, v, d, dv, len, ds, dz);
      else if (isa >= cpu::Isa::avx2) group_bwd_avx2(sh, g, w, v, d, dv, len, ds, dz);
      else group_bwd(sh, g, w, v, d, dv, len, ds, dz);
      group_grads(sh, g, ar, br, a, wmin0[k], wmax0[k], ds, dz, dalpha ? dalpha + k : nullptr,
                  dbeta ? dbeta + k : nullptr);
    }
}

void qdq_bwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha, float* dbeta,
                  int64_t r0, int64_t r1) {
  qdq_bwd_rows(sh, W, V, alpha, beta, wmin0, wmax0, dWhat, dV, dalpha, dbeta, r0, r1, cpu::kernel_isa());
}

}  // namespace ar::quant
