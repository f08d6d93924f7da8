// The fp32 FMA-chain GEMM (kernels/cpu/sgemm_fma.h). Compiled with -ffp-contract=off (CMake): the
// finishing arithmetic is exactly as written, and the only fused operations are the explicit ones.
#include "kernels/cpu/sgemm_fma.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ar::cpu {

namespace {

constexpr int64_t kMr = 6;    // rows of the register tile: 6 x 2 accumulators + 2 B vectors + 1 broadcast
constexpr int64_t kNr = 16;   // columns of the register tile and of a packed op(B) panel
constexpr int64_t kKc = 256;  // depth of a K slice: one op(B) panel is 16 KiB, L1-resident under a tile
constexpr int64_t kMc = 288;  // rows of an op(A) block (288 KiB at full depth, L2-resident)
constexpr int64_t kNarrow = 64;  // columns up to which a transposed op(A) is read in place
constexpr int64_t kNc = 256;  // columns of an op(B) chunk (256 KiB packed at full depth, L2-resident)

constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// K in equal slices of at most kKc (no short tail): the depth of every slice but possibly the last.
constexpr int64_t slice_depth(int64_t K) {
  const int64_t slices = (K + kKc - 1) / kKc;
  return slices > 0 ? (K + slices - 1) / slices : 0;
}

// c = alpha p (beta == 0) or beta c + alpha p, then each addend added: one rounding per operation
// (exact as written: -ffp-contract=off). The kernel's finish_avx2 does the same on 8 lanes.
void finish_rows(const SgemmFmaArgs& g, const float* p, int64_t ldp, int64_t i0, int64_t i1,
                                   int64_t j0, int64_t cols) {
  const float alpha = g.alpha, beta = g.beta;
  for (int64_t i = i0; i < i1; ++i) {
    float* c = g.C + i * g.ldc + j0;
    const float* pr = p + (i - i0) * ldp;
    if (beta == 0.f)
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * pr[j];
    else
      for (int64_t j = 0; j < cols; ++j) c[j] = beta * c[j] + alpha * pr[j];
    for (const float* m : g.add) {
      const float* mr = m + i * g.ldc + j0;
      for (int64_t j = 0; j < cols; ++j) c[j] += mr[j];
    }
  }
}

__attribute__((target("avx2,fma"))) void transpose8_avx2(const float* src, int64_t ld, float* dst) {
  // dst[t * kNr + r] = src[r * ld + t] for an 8 x 8 block
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  const __m256 u0 = _mm256_shuffle_ps(t[0], t[2], 0x44), u1 = _mm256_shuffle_ps(t[0], t[2], 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t[1], t[3], 0x44), u3 = _mm256_shuffle_ps(t[1], t[3], 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t[4], t[6], 0x44), u5 = _mm256_shuffle_ps(t[4], t[6], 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t[5], t[7], 0x44), u7 = _mm256_shuffle_ps(t[5], t[7], 0xEE);
  _mm256_storeu_ps(dst + 0 * kNr, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * kNr, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * kNr, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * kNr, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * kNr, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * kNr, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * kNr, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * kNr, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// op(B)'s rows k0..k0+kc of columns n0..n1 (at most kNc) as [kc][16] panels, one after another (panel q holds
// columns n0 + 16q.. at out + q * kc * 16), columns past n1 zero.
template <bool TB>
__attribute__((target("avx2,fma"))) void pack_b_avx2(const SgemmFmaArgs& g, int64_t k0, int64_t kc, int64_t n0,
                                                     int64_t n1, float* out) {
  if constexpr (!TB) {  // op(B)[k, j] = B[k, j]: each row read once, in order, dealt out to the panels
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = g.B + (k0 + k) * g.ldb;
      float* dst = out + k * kNr;
      int64_t j0 = n0;
      for (; j0 + kNr <= n1; j0 += kNr, dst += kc * kNr) {
        _mm256_storeu_ps(dst, _mm256_loadu_ps(src + j0));
        _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + j0 + 8));
      }
      if (j0 < n1)
        for (int64_t j = 0; j < kNr; ++j) dst[j] = j0 + j < n1 ? src[j0 + j] : 0.f;
    }
  } else {  // op(B)[k, j] = B[j, k]: 8 x 8 transposes where a panel is whole
    for (int64_t j0 = n0; j0 < n1; j0 += kNr, out += kc * kNr) {
      const int64_t nr = std::min(kNr, n1 - j0);
      const float* src = g.B + j0 * g.ldb + k0;
      int64_t k = 0;
      if (nr == kNr)
        for (; k + 8 <= kc; k += 8) {
          transpose8_avx2(src + k, g.ldb, out + k * kNr);
          transpose8_avx2(src + 8 * g.ldb + k, g.ldb, out + k * kNr + 8);
        }
      for (; k < kc; ++k)
        for (int64_t j = 0; j < kNr; ++j) out[k * kNr + j] = j < nr ? src[j * g.ldb + k] : 0.f;
    }
  }
}

// op(A) = A^T's rows i0..i0+mr, k0..k0+kc as a [kc][6] panel (six neighbours of A per k), rows past mr
// zero. op(A) = A is read in place: its rows are already K-contiguous.
void pack_at(const SgemmFmaArgs& g, int64_t i0, int64_t mr, int64_t k0, int64_t kc, float* out) {
  const float* src = g.A + k0 * g.lda + i0;
  if (mr == kMr) {  // a fixed count: plain moves, not a library call per k
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t i = 0; i < kMr; ++i) out[k * kMr + i] = src[k * g.lda + i];
    return;
  }
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t i = 0; i < kMr; ++i) out[k * kMr + i] = i < mr ? src[k * g.lda + i] : 0.f;
}

// The last K slice finishes C's elements in the tile's registers (finish_rows' arithmetic, each
// operation on 8 lanes: the same roundings); columns past nr are masked off.
struct TileOut {
  const SgemmFmaArgs* g;
  int64_t i0, j0, nr;
};

__attribute__((target("avx2,fma"))) inline __m256i lane_mask_avx2(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), lanes);
}

__attribute__((target("avx2,fma"))) inline void finish_avx2(const TileOut& o, int64_t i, int64_t h, __m256 acc) {
  const SgemmFmaArgs& g = *o.g;
  const int64_t off = (o.i0 + i) * g.ldc + o.j0 + h * 8;
  if (o.nr == kNr) {  // a whole panel: plain moves (masked ones are microcoded on AMD cores)
    __m256 v = _mm256_mul_ps(_mm256_set1_ps(g.alpha), acc);
    if (g.beta != 0.f) v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(g.beta), _mm256_loadu_ps(g.C + off)), v);
    for (const float* a : g.add) v = _mm256_add_ps(v, _mm256_loadu_ps(a + off));
    return _mm256_storeu_ps(g.C + off, v);
  }
  const __m256i m = lane_mask_avx2(o.nr - h * 8);
  __m256 v = _mm256_mul_ps(_mm256_set1_ps(g.alpha), acc);
  if (g.beta != 0.f) v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(g.beta), _mm256_maskload_ps(g.C + off, m)), v);
  for (const float* a : g.add) v = _mm256_add_ps(v, _mm256_maskload_ps(a + off, m));
  _mm256_maskstore_ps(g.C + off, m, v);
}

// The MR x 16 tile over kc steps of k, one FMA chain per element: resumed from p[MR][ldp] or from zero,
// then stored to p, or finished into C when `out` is given. op(A)'s element (i, k) is at a[i * rs + k]
// (in place) or a[i + k * 6] (packed).
// Where a tile's op(A) element (i, k) is: a[i * s + k] (A in place), a[i + k * s] (A^T in place) or
// a[i + k * 6] (A^T packed).
enum ALayout : int { kRowsInPlace, kColsInPlace, kPacked };

template <int MR, int kLayout>
__attribute__((target("avx2,fma"))) void tile_avx2(int64_t kc, const float* a, int64_t rs, const float* bp, float* p,
                                                   int64_t ldp, bool resume, const TileOut* out) {
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    c0[i] = resume ? _mm256_loadu_ps(p + i * ldp) : _mm256_setzero_ps();
    c1[i] = resume ? _mm256_loadu_ps(p + i * ldp + 8) : _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(bp + k * kNr), b1 = _mm256_loadu_ps(bp + k * kNr + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(kLayout == kPacked       ? a + i + k * kMr
                                            : kLayout == kColsInPlace ? a + i + k * rs
                                                                      : a + i * rs + k);
      c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
    }
  }
  if (out) {
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      finish_avx2(*out, i, 0, c0[i]);
      finish_avx2(*out, i, 1, c1[i]);
    }
    return;
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(p + i * ldp, c0[i]);
    _mm256_storeu_ps(p + i * ldp + 8, c1[i]);
  }
}

template <int kLayout>
__attribute__((target("avx2,fma"))) inline void tile_rows_avx2(int64_t mr, int64_t kc, const float* a, int64_t rs,
                                                               const float* bp, float* p, int64_t ldp, bool resume,
                                                               const TileOut* out) {
  switch (mr) {
    case 6: return tile_avx2<6, kLayout>(kc, a, rs, bp, p, ldp, resume, out);
    case 5: return tile_avx2<5, kLayout>(kc, a, rs, bp, p, ldp, resume, out);
    case 4: return tile_avx2<4, kLayout>(kc, a, rs, bp, p, ldp, resume, out);
    case 3: return tile_avx2<3, kLayout>(kc, a, rs, bp, p, ldp, resume, out);
    case 2: return tile_avx2<2, kLayout>(kc, a, rs, bp, p, ldp, resume, out);
    default: return tile_avx2<1, kLayout>(kc, a, rs, bp, p, ldp, resume, out);
  }
}

// Scratch: op(B)'s chunk as panels [kNc / 16][kKc][16], op(A)^T's block as panels [kMc / 6][kKc][6],
// then the block's partial chains P [kMc][kNc] when K takes several slices: a fixed 1.1 MiB at most,
// whatever the size of the product.
struct Scratch {
  float *B, *A, *P;
  explicit Scratch(float* s) : B(s), A(B + kNc * kKc), P(A + kMc * kKc) {}
};

// A^T is packed where its panels serve many columns; for a narrow block (attention's head_dim) the
// copy would cost a quarter of the products, and its rows are read in place. op(A) = A is never packed:
// its rows are K-contiguous already (packing them as 6-row panels measured 2-3% slower on Zen 4).
bool packs_a(bool ta, int64_t cols) { return ta && cols > kNarrow; }

void pack_a_block(const SgemmFmaArgs& g, const Scratch& s, int64_t m0, int64_t m1, int64_t k0, int64_t kc) {
  for (int64_t i0 = m0; i0 < m1; i0 += kMr) pack_at(g, i0, std::min(kMr, m1 - i0), k0, kc, s.A + (i0 - m0) * kc);
}

// Rows m0..m1 (at most kMc) and columns n0..n1 (at most kNc), per K slice: op(B) and op(A)^T packed
// once, then every 16-column panel over every 6-row tile; P holds each element's chain between slices
// and the last slice finishes C. Slices are equal (at most kKc deep, no short tail). a_ready: K is one
// slice and the caller packed op(A)^T's block already (it serves every column chunk of the rows).
template <bool TA, bool TB>
__attribute__((target("avx2,fma"))) void block_avx2(const SgemmFmaArgs& g, const Scratch& s, int64_t m0, int64_t m1,
                                                    int64_t n0, int64_t n1, bool a_ready) {
  const int64_t depth = slice_depth(g.K);
  const bool pack_a = packs_a(TA, n1 - n0);
  for (int64_t k0 = 0; k0 < g.K; k0 += depth) {
    const int64_t kc = std::min(depth, g.K - k0);
    const bool last = k0 + kc == g.K;
    // The slice's panels of columns n0.. (n0 a multiple of 16 when packed beforehand)
    const float* panels = g.packed_b ? g.packed_b + k0 * round_up(g.N, kNr) + n0 * kc : s.B;
    if (!g.packed_b) pack_b_avx2<TB>(g, k0, kc, n0, n1, s.B);
    if (pack_a && !a_ready) pack_a_block(g, s, m0, m1, k0, kc);
    for (int64_t j0 = n0; j0 < n1; j0 += kNr)
      for (int64_t i0 = m0; i0 < m1; i0 += kMr) {
        const int64_t mr = std::min(kMr, m1 - i0);
        const float* bp = panels + (j0 - n0) * kc;
        float* p = s.P + (i0 - m0) * kNc + (j0 - n0);
        const TileOut out{&g, i0, j0, std::min(kNr, n1 - j0)};
        const TileOut* o = last ? &out : nullptr;
        if (!TA) tile_rows_avx2<kRowsInPlace>(mr, kc, g.A + i0 * g.lda + k0, g.lda, bp, p, kNc, k0 > 0, o);
        else if (pack_a) tile_rows_avx2<kPacked>(mr, kc, s.A + (i0 - m0) * kc, 0, bp, p, kNc, k0 > 0, o);
        else tile_rows_avx2<kColsInPlace>(mr, kc, g.A + k0 * g.lda + i0, g.lda, bp, p, kNc, k0 > 0, o);
      }
  }
}

template <bool TA, bool TB>
__attribute__((target("avx2,fma"))) void blocked_avx2(const SgemmFmaArgs& g, int64_t m0, int64_t m1, int64_t n0,
                                                      int64_t n1, float* scratch) {
  if (g.K == 0) {  // no products: every chain is +0
    const std::vector<float> zeros(size_t(n1 - n0), 0.f);
    return finish_rows(g, zeros.data(), 0, m0, m1, n0, n1 - n0);
  }
  const Scratch s(scratch);
  // Equal chunks of whole panels (288 columns are 2 x 144, not 256 + 32: a narrow last chunk would
  // stream op(A) again for little work).
  const int64_t chunks = (n1 - n0 + kNc - 1) / kNc, width = round_up((n1 - n0 + chunks - 1) / chunks, kNr);
  // With K in one slice, a packed op(A) block serves every chunk: packed once, before them.
  const bool hoist_a = g.K <= kKc && chunks > 1 && packs_a(TA, width);
  for (int64_t mb = m0; mb < m1; mb += kMc) {
    const int64_t me = std::min(m1, mb + kMc);
    if (hoist_a) pack_a_block(g, s, mb, me, 0, g.K);
    for (int64_t jc = n0; jc < n1; jc += width) block_avx2<TA, TB>(g, s, mb, me, jc, std::min(n1, jc + width), hoist_a);
  }
}

}  // namespace

int64_t sgemm_fma_packed_floats(int64_t K, int64_t N) { return K * round_up(N, kNr); }

void sgemm_fma_pack_b_avx2(const SgemmFmaArgs& g, int64_t p0, int64_t p1, float* dst) {
  const int64_t depth = slice_depth(g.K), n0 = p0 * kNr, n1 = std::min(g.N, p1 * kNr);
  if (n1 <= n0) return;
  for (int64_t k0 = 0; k0 < g.K; k0 += depth) {
    const int64_t kc = std::min(depth, g.K - k0);
    float* out = dst + k0 * round_up(g.N, kNr) + n0 * kc;
    if (g.tb) pack_b_avx2<true>(g, k0, kc, n0, n1, out);
    else pack_b_avx2<false>(g, k0, kc, n0, n1, out);
  }
}

int64_t sgemm_fma_scratch(int64_t K) { return kNc * kKc + kMc * kKc + (K > kKc ? kMc * kNc : 0); }

void sgemm_fma_avx2(const SgemmFmaArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* scratch) {
  if (m1 <= m0 || n1 <= n0) return;
  if (g.ta) {
    if (g.tb) return blocked_avx2<true, true>(g, m0, m1, n0, n1, scratch);
    return blocked_avx2<true, false>(g, m0, m1, n0, n1, scratch);
  }
  if (g.tb) return blocked_avx2<false, true>(g, m0, m1, n0, n1, scratch);
  return blocked_avx2<false, false>(g, m0, m1, n0, n1, scratch);
}

void sgemm_fma_ref(const SgemmFmaArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  for (int64_t i = m0; i < m1; ++i)
    for (int64_t j = n0; j < n1; ++j) {
      float p = 0.f;
      for (int64_t k = 0; k < g.K; ++k) {
        const float a = g.ta ? g.A[k * g.lda + i] : g.A[i * g.lda + k];
        const float b = g.tb ? g.B[j * g.ldb + k] : g.B[k * g.ldb + j];
        p = std::fma(a, b, p);
      }
      finish_rows(g, &p, 1, i, i + 1, j, 1);
    }
}

}  // namespace ar::cpu
