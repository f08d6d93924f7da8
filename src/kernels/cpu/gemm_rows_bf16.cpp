// The bf16 GEMM whose rows do not depend on the call's other rows (bf16_ops.h, gemm_rows_bf16).
// Compiled with -ffp-contract=off (CMake): the finishing arithmetic is exactly as written.
//
// Every element is one chain of VDPBF16PS steps over k's pairs in order, from zero:
//   acc = dpbf16(... dpbf16(dpbf16(0, a[i,0:2], b[0:2,j]), a[i,2:4], b[2:4,j]) ..., a[i,K-2:K], b[K-2:K,j])
// (an odd K's last pair padded with zeros), then c = alpha acc (beta == 0) or beta c + alpha acc. A
// 12 x 32 register tile runs the whole chain of its elements; op(B) is packed per 32-column panel as
// the instruction's pairs (even k in the low half). Nothing depends on M, the tile a row falls in or
// the thread count, so a row's bits are those of any call that contains it (tests/test_kernels_bf16.cpp).
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC PR 105593 in the AVX-512 headers
#endif

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"

namespace ar::cpu {

namespace {

constexpr int64_t kMr = 12;  // rows of the register tile: 12 x 2 accumulators + 2 B vectors + a broadcast
constexpr int64_t kNr = 32;  // columns of a tile and of a packed panel: two ZMM of fp32 sums

// Word p * kNr + jj of a panel: (op(B)[2p, j0 + jj], op(B)[2p + 1, j0 + jj]), zeros past K and past nr.
struct PanelSrc {
  const uint16_t* B;
  int64_t ldb, K, j0, nr;
  bool tb;  // op(B) = B^T: column j of op(B) is row j of B (a weight W [N, K]: the forward's W^T)
};

__attribute__((target("avx512f,avx512bw"))) inline __mmask32 first_lanes_avx512(int64_t n) {
  return n >= 32 ? __mmask32(~0u) : __mmask32((1u << n) - 1);
}

// op(B) = B [K, N]: rows 2p and 2p + 1 interleaved (one two-source permute per 16 words).
__attribute__((target("avx512f,avx512bw"))) void pack_interleave_avx512(const PanelSrc& s, uint32_t* out) {
  static constexpr auto kIdx = [] {
    std::array<uint16_t, 64> v{};
    for (int i = 0; i < 16; ++i) {
      v[size_t(2 * i)] = uint16_t(i), v[size_t(2 * i + 1)] = uint16_t(32 + i);            // words 0-15
      v[size_t(32 + 2 * i)] = uint16_t(16 + i), v[size_t(32 + 2 * i + 1)] = uint16_t(48 + i);  // 16-31
    }
    return v;
  }();
  const __m512i lo = _mm512_loadu_si512(kIdx.data()), hi = _mm512_loadu_si512(kIdx.data() + 32);
  const __mmask32 m = first_lanes_avx512(s.nr);
  for (int64_t p = 0, k = 0; k < s.K; ++p, k += 2) {
    const __m512i r0 = _mm512_maskz_loadu_epi16(m, s.B + k * s.ldb + s.j0);
    const __m512i r1 = k + 1 < s.K ? _mm512_maskz_loadu_epi16(m, s.B + (k + 1) * s.ldb + s.j0) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + p * kNr, _mm512_permutex2var_epi16(r0, lo, r1));
    _mm512_storeu_si512(out + p * kNr + 16, _mm512_permutex2var_epi16(r0, hi, r1));
  }
}

// r[i] (16 words of row i) -> r[q] (word q of rows 0..15).
__attribute__((target("avx512f"))) inline void transpose16_avx512(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  __m512i s[16];  // s[4g + c], 128-bit lane L: column 4L + c of rows 4g..4g+3
  for (int g = 0; g < 4; ++g) {
    s[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    s[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    s[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    s[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // a 4 x 4 transpose of 128-bit lanes over s[c], s[4 + c], s[8 + c], s[12 + c]
    const __m512i u0 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0x44), u1 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0xEE);
    const __m512i u2 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0x44),
                  u3 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(u0, u2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(u1, u3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
  }
}

// op(B) = B^T, B [N, K]: each row's pairs are already words; 16 x 16 transposes of them.
__attribute__((target("avx512f,avx512bw"))) void pack_transpose_avx512(const PanelSrc& s, uint32_t* out) {
  const int64_t pairs = (s.K + 1) / 2;
  for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
    const __mmask32 m = first_lanes_avx512(s.K - 2 * p0);
    const int64_t rows_out = std::min<int64_t>(16, pairs - p0);
    for (int h = 0; h < 2; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t j = 16 * h + i;
        r[i] = j < s.nr ? _mm512_maskz_loadu_epi16(m, s.B + (s.j0 + j) * s.ldb + 2 * p0) : _mm512_setzero_si512();
      }
      transpose16_avx512(r);
      for (int64_t q = 0; q < rows_out; ++q) _mm512_storeu_si512(out + (p0 + q) * kNr + 16 * h, r[q]);
    }
  }
}

struct Finish {
  float alpha, beta;
  float* C;
  int64_t ldc;
};

// c = alpha acc or beta c + alpha acc (one rounding each, as written) on `cols` lanes.
__attribute__((target("avx512f"))) inline void finish_avx512(const Finish& f, float* c, int64_t cols, __m512 acc) {
  const __mmask16 m = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(cols, 0)) - 1);
  __m512 v = _mm512_mul_ps(_mm512_set1_ps(f.alpha), acc);
  if (f.beta != 0.f) v = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(f.beta), _mm512_maskz_loadu_ps(m, c)), v);
  _mm512_mask_storeu_ps(c, m, v);
}

// Rows i0..i0+MR of C over one panel: the whole chain of each element in registers.
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void tile_avx512(const uint16_t* A, int64_t lda, int64_t K,
                                                                  const uint32_t* bp, const Finish& f, float* c,
                                                                  int64_t cols) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  const int64_t whole = K / 2;
  for (int64_t p = 0; p < whole; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + p * kNr), b1 = (__m512bh)_mm512_loadu_si512(bp + p * kNr + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      int32_t w;
      std::memcpy(&w, A + i * lda + 2 * p, sizeof w);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(w);
      c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
    }
  }
  if (K % 2) {  // the last k alone: its pair's high half is zero (never read past the row)
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + whole * kNr),
                   b1 = (__m512bh)_mm512_loadu_si512(bp + whole * kNr + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(A[i * lda + K - 1]));
      c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    finish_avx512(f, c + i * f.ldc, cols, c0[i]);
    finish_avx512(f, c + i * f.ldc + 16, cols - 16, c1[i]);
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, int64_t, const uint32_t*, const Finish&, float*, int64_t);
constexpr TileFn kTiles[kMr + 1] = {nullptr,         tile_avx512<1>, tile_avx512<2>,  tile_avx512<3>,  tile_avx512<4>,
                                    tile_avx512<5>,  tile_avx512<6>, tile_avx512<7>,  tile_avx512<8>,  tile_avx512<9>,
                                    tile_avx512<10>, tile_avx512<11>, tile_avx512<12>};

void pack_panel(const PanelSrc& s, uint32_t* out) {
  if (s.tb) pack_transpose_avx512(s, out);
  else pack_interleave_avx512(s, out);
}

}  // namespace

// Read once: every call of the kernel and its packs asks, and cpuid is a VM exit on virtual machines
// (~30 us per cpu_isa() on one: 85% of a weight-gradient tree's time when each pack asked).
bool gemm_rows_bf16_supported() {
  static const bool supported = cpu_isa().avx512_bf16;
  return supported;
}

void gemm_rows_bf16_pack_ref(bool tb, const uint16_t* B, int64_t ldb, int64_t K, int64_t j0, int64_t nr,
                             uint32_t* out) {
  const int64_t pairs = (K + 1) / 2;
  auto at = [&](int64_t k, int64_t j) -> uint32_t {
    if (k >= K || j >= nr) return 0;
    return tb ? B[(j0 + j) * ldb + k] : B[k * ldb + j0 + j];
  };
  for (int64_t p = 0; p < pairs; ++p)
    for (int64_t j = 0; j < kNr; ++j) out[p * kNr + j] = at(2 * p, j) | at(2 * p + 1, j) << 16;
}

void gemm_rows_bf16_pack(bool tb, const uint16_t* B, int64_t ldb, int64_t K, int64_t j0, int64_t nr, uint32_t* out) {
  AR_CHECK(gemm_rows_bf16_supported(), "gemm_rows_bf16 needs AVX512_BF16");
  pack_panel({B, ldb, K, j0, nr, tb}, out);
}

void gemm_rows_bf16(Context& ctx, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                    int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  AR_CHECK(gemm_rows_bf16_supported(), "gemm_rows_bf16 needs AVX512_BF16");
  if (M <= 0 || N <= 0) return;
  const int64_t panels = (N + kNr - 1) / kNr, words = std::max<int64_t>((K + 1) / 2, 1) * kNr;
  // Each unit a run of panels, packing only its own (the bits do not depend on the split).
  const int64_t units = std::min<int64_t>(ctx.pool().size(), panels);
  Tensor scratch = Tensor::empty({units * words}, DType::F32, ctx);  // one panel per unit, as 32-bit words
  const Finish f{alpha, beta, C, ldc};
  auto unit = [&](int64_t u) {
    uint32_t* bp = reinterpret_cast<uint32_t*>(scratch.f32()) + u * words;
    for (int64_t q = panels * u / units; q < panels * (u + 1) / units; ++q) {
      const int64_t j0 = q * kNr, cols = std::min(kNr, N - j0);
      pack_panel({B, ldb, K, j0, cols, tb}, bp);
      for (int64_t i0 = 0; i0 < M; i0 += kMr)
        kTiles[std::min(kMr, M - i0)](A + i0 * lda, lda, K, bp, f, C + i0 * ldc + j0, cols);
    }
  };
  if (units == 1) return unit(0);
  ctx.pool().parallel_for(units, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) unit(u);
  }, 1);
}

}  // namespace ar::cpu
