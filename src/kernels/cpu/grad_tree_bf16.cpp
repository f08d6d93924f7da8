// A tuning tree's weight gradient over several leaves in one pass over the output (bf16_ops.h,
// weight_grad_tree_bf16). Compiled with -ffp-contract=off (CMake): the sums are exactly as written.
//
// Leaf l's product, every element one chain of VDPBF16PS steps over the pairs of its rows in order,
// from zero (an odd row count's last pair padded with zeros):
//   P_l[o, i] = dpbf16(... dpbf16(0, (dy[0, o], dy[1, o]), (x[0, i], x[1, i])) ...,
//                      (dy[2p, o], dy[2p + 1, o]), (x[2p, i], x[2p + 1, i]))
// which is gemm_rows_bf16's chain for A = dy^T and B = x. Step l then sets buffer dst to P_l, plus
// buffer dst when it accumulates, plus each of its addends in order, one rounding per addition.
//
// An 8 x 32 tile of the output runs every step in turn: the chain of each leaf in registers, the
// tree's buffers as tiles of its own (a few KiB, in L1), the result stored once. The leaves' dy are
// packed once per call in 32-column panels of dy's columns (the tile's 8 rows are a quarter of one),
// their x per 32-column panel of the output as the unit reaches it. Per-leaf GEMMs would instead pass
// over the whole [out, in] gradient once per leaf, with a few rows each: memory-bound.
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC PR 105593 in the AVX-512 headers
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"

namespace ar::cpu {

namespace {

constexpr int64_t kMr = 8;   // rows of a tile (a quarter of a packed panel of dy's columns)
constexpr int64_t kNr = 32;  // columns of a tile and of a packed panel: two ZMM of fp32 sums
constexpr int64_t kTile = kMr * kNr;

// Everything a tile reads. a[l]: leaf l's dy panels, panel q at a[l] + q * pairs[l] * kNr (words
// p * kNr + jj: (dy[2p, 32 q + jj], dy[2p + 1, 32 q + jj])); b[l]: leaf l's x panel of the unit's
// current output columns, likewise.
struct TreeRun {
  const std::vector<GradTreeStep>* steps;
  Addends extra;
  const uint32_t* const* a;
  const uint32_t* const* b;
  const int64_t* pairs;
  int64_t out, in;
  float* dW;
  bool init_from_dw;
};

__attribute__((target("avx512f"))) inline __mmask16 lanes_avx512(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1);
}

// The output rows [o0, o0 + kMr) and columns [i0, i0 + cols) through every step; s holds the scratch
// buffers' tiles (buffer k at s + k * kTile, rows of kNr floats).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void tile_avx512(const TreeRun& r, int64_t o0, int64_t i0,
                                                                  int64_t cols, float* s) {
  const int64_t rows = std::min(kMr, r.out - o0), q = o0 / kNr, sub = o0 % kNr;
  const __mmask16 m0 = lanes_avx512(cols), m1 = lanes_avx512(cols - 16);
  if (r.init_from_dw)
    for (int64_t i = 0; i < kMr; ++i) {
      const bool live = i < rows;
      const float* d = r.dW + (o0 + (live ? i : 0)) * r.in + i0;  // no address past dW's rows
      _mm512_storeu_ps(s + i * kNr, _mm512_maskz_loadu_ps(live ? m0 : 0, d));
      _mm512_storeu_ps(s + i * kNr + 16, _mm512_maskz_loadu_ps(live ? m1 : 0, d + 16));
    }
  const std::vector<GradTreeStep>& steps = *r.steps;
  for (size_t l = 0; l < steps.size(); ++l) {
    __m512 c0[kMr], c1[kMr];
#pragma GCC unroll 8
    for (int64_t i = 0; i < kMr; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
    const int64_t pairs = r.pairs[l];
    const uint32_t* a = r.a[l] + q * pairs * kNr + sub;
    const uint32_t* b = r.b[l];
    for (int64_t p = 0; p < pairs; ++p) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kNr), b1 = (__m512bh)_mm512_loadu_si512(b + p * kNr + 16);
#pragma GCC unroll 8
      for (int64_t i = 0; i < kMr; ++i) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(int32_t(a[p * kNr + i]));
        c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);
        c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);
      }
    }
    const GradTreeStep& st = steps[l];
    // The buffer itself when accumulating, then the addends: a scratch tile, or the rows of a matrix
    // (rows past `out` are never stored, so never read). Every loop over the accumulators has kMr
    // trips: a runtime bound would keep them in memory instead of registers.
    for (int64_t j = st.accumulate ? -1 : 0; j < int64_t(st.adds.size()); ++j) {
      const int k = j < 0 ? st.dst : st.adds[size_t(j)];
      const bool own = k >= 0;
      const float* t = own ? s + k * kTile : r.extra[size_t(-1 - k)] + o0 * r.in + i0;
      const int64_t ld = own ? kNr : r.in;
#pragma GCC unroll 8
      for (int64_t i = 0; i < kMr; ++i) {
        const bool live = own || i < rows;
        const float* ti = t + (live ? i : 0) * ld;
        c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(live ? (own ? __mmask16(0xFFFF) : m0) : 0, ti));
        c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(live ? (own ? __mmask16(0xFFFF) : m1) : 0, ti + 16));
      }
    }
    float* d = s + st.dst * kTile;
#pragma GCC unroll 8
    for (int64_t i = 0; i < kMr; ++i) {
      _mm512_storeu_ps(d + i * kNr, c0[i]);
      _mm512_storeu_ps(d + i * kNr + 16, c1[i]);
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    _mm512_mask_storeu_ps(r.dW + (o0 + i) * r.in + i0, m0, _mm512_loadu_ps(s + i * kNr));
    _mm512_mask_storeu_ps(r.dW + (o0 + i) * r.in + i0 + 16, m1, _mm512_loadu_ps(s + i * kNr + 16));
  }
}

}  // namespace

void weight_grad_tree_bf16(Context& ctx, const std::vector<GradLeafBf16>& leaves,
                           const std::vector<GradTreeStep>& steps, Addends extra, int64_t out, int64_t in, float* dW) {
  AR_CHECK(gemm_rows_bf16_supported(), "weight_grad_tree_bf16 needs AVX512_BF16");
  AR_CHECK(steps.size() == leaves.size() && !steps.empty(),
           "weight_grad_tree_bf16: " + std::to_string(steps.size()) + " steps for " + std::to_string(leaves.size()) + " leaves");
  if (out <= 0 || in <= 0) return;
  bool init_from_dw = false;
  const int buffers = grad_tree_buffers(steps, extra.size(), init_from_dw);
  const size_t L = leaves.size();
  const int64_t opanels = (out + kNr - 1) / kNr, ipanels = (in + kNr - 1) / kNr;
  std::vector<int64_t> pairs(L), aoff(L + 1), boff(L + 1);
  for (size_t l = 0; l < L; ++l) {
    pairs[l] = (std::max<int64_t>(leaves[l].rows, 0) + 1) / 2;
    aoff[l + 1] = aoff[l] + pairs[l] * opanels * kNr;
    boff[l + 1] = boff[l] + pairs[l] * kNr;
  }
  auto words = [&](int64_t n) { return Tensor::empty({std::max<int64_t>(n, 1)}, DType::F32, ctx); };
  Tensor apack = words(aoff[L]);
  uint32_t* A = reinterpret_cast<uint32_t*>(apack.f32());
  std::vector<const uint32_t*> a(L);
  for (size_t l = 0; l < L; ++l) {
    a[l] = A + aoff[l];
    for (int64_t q = 0; q < opanels && pairs[l] > 0; ++q)
      gemm_rows_bf16_pack(false, leaves[l].dy, out, leaves[l].rows, q * kNr, std::min(kNr, out - q * kNr),
                          A + aoff[l] + q * pairs[l] * kNr);
  }
  // Each unit a run of output-column panels, with its own x packs and tree tiles (no bits depend on the
  // split).
  const int64_t units = std::min<int64_t>(ctx.pool().size(), ipanels);
  const int64_t unit_words = boff[L] + buffers * kTile;
  Tensor scratch = words(units * unit_words);
  auto unit = [&](int64_t u) {
    uint32_t* B = reinterpret_cast<uint32_t*>(scratch.f32()) + u * unit_words;
    float* tiles = reinterpret_cast<float*>(B + boff[L]);
    std::vector<const uint32_t*> b(L);
    for (size_t l = 0; l < L; ++l) b[l] = B + boff[l];
    const TreeRun run{&steps, extra, a.data(), b.data(), pairs.data(), out, in, dW, init_from_dw};
    for (int64_t qi = ipanels * u / units; qi < ipanels * (u + 1) / units; ++qi) {
      const int64_t i0 = qi * kNr, cols = std::min(kNr, in - i0);
      for (size_t l = 0; l < L; ++l)
        if (pairs[l] > 0) gemm_rows_bf16_pack(false, leaves[l].x, in, leaves[l].rows, i0, cols, B + boff[l]);
      for (int64_t o0 = 0; o0 < out; o0 += kMr) tile_avx512(run, o0, i0, cols, tiles);
    }
  };
  if (units == 1) return unit(0);
  ctx.pool().parallel_for(units, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) unit(u);
  }, 1);
}

}  // namespace ar::cpu
