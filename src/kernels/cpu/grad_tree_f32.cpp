// The weight-gradient tree of grad_tree_bf16.cpp in fp32 (ops.h, weight_grad_tree_f32), for the
// tuner's deterministic MoE runs without amp. Compiled with -ffp-contract=off (CMake).
//
// Leaf l's product, every element one FMA chain over its rows in order, from zero:
//   P_l[o, i] = fma(dy[r-1, o], x[r-1, i], ... fma(dy[1, o], x[1, i], dy[0, o] * x[0, i]))
// which is sgemm_fma's definition (sgemm_fma.h) for op(A) = dy^T, B = x. The steps then sum the
// tree exactly as in the bf16 kernel: buffer dst = P_l (+ buffer dst) + each addend in order.
//
// A 6 x 16 tile of the output runs every step in turn: the leaf's product in 12 YMM accumulators,
// the step's sums added to them in registers from tiles of the kernel's own (the tree's buffers and
// a copy of each external addend), the result stored to its buffer's tile; the root is stored once.
// Both operands are packed (below); a unit's rows of the output go in blocks whose dy stays in L2
// while the unit's columns pass. The grad_tree_bench figures are in docs/benchmarks.md.
#include <immintrin.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {

constexpr int64_t kMr = 6;   // rows of a tile
constexpr int64_t kNr = 16;  // columns: two YMM
constexpr int64_t kTile = kMr * kNr;
constexpr int64_t kL2Floats = 48 * 1024;  // the dy of a block of output rows, every leaf: 192 KiB

// a[l]: leaf l's dy packed per 6-row tile of the output, tile q at a[l] + q * rows_l * kMr (float
// t * kMr + i: dy[t, 6q + i], zeros past out); b[l]: its x over the current 16 output columns, float
// t * kNr + j: x[t, i0 + j], zeros past in. Read in place instead, x's rows 8 KiB apart fell into the
// same L1 sets.
struct TreeRun {
  const std::vector<GradLeafF32>* leaves;
  const std::vector<GradTreeStep>* steps;
  const float* const* a;
  const float* const* b;
  Addends extra;
  int64_t out, in;
  float* dW;
  bool init_from_dw;
};

// The first n lanes of 16 (n in 0..16) as two YMM masks, for the partial tiles at the edges of the
// output (the rows past `out` get none).
struct Lanes {
  alignas(32) int32_t m[16];
  explicit Lanes(int64_t n) {
    for (int64_t j = 0; j < 16; ++j) m[j] = j < n ? -1 : 0;
  }
};

__attribute__((target("avx2"))) inline __m256i lanes_avx2(const Lanes& m, int half) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(m.m + 8 * half));
}

// Rows [o0, o0 + kMr) and columns [i0, i0 + cols) of a [*, ld] matrix into the tile t, zeros past
// `rows` and `cols` (no address past the matrix's rows); whole 16-column rows take plain moves
// (vmaskmovps is microcoded on AMD cores).
__attribute__((target("avx2"))) void load_tile_avx2(const float* m, int64_t ld, int64_t rows, int64_t cols, float* t) {
  const Lanes lanes(cols);
  for (int64_t i = 0; i < kMr; ++i) {
    const float* src = m + std::min(i, rows - 1) * ld;
    if (i >= rows) {
      _mm256_storeu_ps(t + i * kNr, _mm256_setzero_ps());
      _mm256_storeu_ps(t + i * kNr + 8, _mm256_setzero_ps());
    } else if (cols == kNr) {
      _mm256_storeu_ps(t + i * kNr, _mm256_loadu_ps(src));
      _mm256_storeu_ps(t + i * kNr + 8, _mm256_loadu_ps(src + 8));
    } else {
      _mm256_storeu_ps(t + i * kNr, _mm256_maskload_ps(src, lanes_avx2(lanes, 0)));
      _mm256_storeu_ps(t + i * kNr + 8, _mm256_maskload_ps(src + 8, lanes_avx2(lanes, 1)));
    }
  }
}

// Step l on one tile: leaf l's chain from zero in twelve YMM accumulators, as sgemm_fma's tile runs
// it; then, in the same registers, the buffer itself when the step accumulates and each addend in
// order (every one a whole tile in s: the external addends were copied there), one rounding per
// addition; the result stored to the step's buffer. Every loop over the accumulators has kMr trips
// and the additions read memory operands, so the twelve stay in registers.
__attribute__((target("avx2,fma"))) void step_avx2(const TreeRun& r, size_t l, int64_t o0, float* s, int buffers) {
  __m256 c0[kMr], c1[kMr];
#pragma GCC unroll 6
  for (int i = 0; i < int(kMr); ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  const int64_t n = (*r.leaves)[l].rows;
  const float* a = r.a[l] + (o0 / kMr) * n * kMr;
  const float* b = r.b[l];
  for (int64_t t = 0; t < n; ++t) {
    const __m256 b0 = _mm256_loadu_ps(b + t * kNr), b1 = _mm256_loadu_ps(b + t * kNr + 8);
#pragma GCC unroll 6
    for (int i = 0; i < int(kMr); ++i) {
      const __m256 av = _mm256_broadcast_ss(a + t * kMr + i);
      c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
    }
  }
  const GradTreeStep& st = (*r.steps)[l];
  for (int64_t j = st.accumulate ? -1 : 0; j < int64_t(st.adds.size()); ++j) {
    const int k = j < 0 ? st.dst : st.adds[size_t(j)];
    const float* t = s + (k >= 0 ? k : buffers - 1 - k) * kTile;
#pragma GCC unroll 6
    for (int i = 0; i < int(kMr); ++i) {
      c0[i] = _mm256_add_ps(c0[i], _mm256_loadu_ps(t + i * kNr));
      c1[i] = _mm256_add_ps(c1[i], _mm256_loadu_ps(t + i * kNr + 8));
    }
  }
  float* d = s + st.dst * kTile;
#pragma GCC unroll 6
  for (int i = 0; i < int(kMr); ++i) {
    _mm256_storeu_ps(d + i * kNr, c0[i]);
    _mm256_storeu_ps(d + i * kNr + 8, c1[i]);
  }
}

// Output rows [o0, o0 + kMr) and columns [i0, i0 + ncols) through every step; s: the scratch tiles
// (the tree's buffers, then one per external addend).
__attribute__((target("avx2,fma"))) void tile_avx2(const TreeRun& r, int64_t o0, int64_t i0, int64_t ncols, float* s,
                                                  int buffers) {
  const int64_t rows = std::min(kMr, r.out - o0);
  if (r.init_from_dw) load_tile_avx2(r.dW + o0 * r.in + i0, r.in, rows, ncols, s);
  for (size_t e = 0; e < r.extra.size(); ++e)
    load_tile_avx2(r.extra[e] + o0 * r.in + i0, r.in, rows, ncols, s + (buffers + int64_t(e)) * kTile);
  for (size_t l = 0; l < r.steps->size(); ++l) step_avx2(r, l, o0, s, buffers);
  const Lanes cols(ncols);
  for (int64_t i = 0; i < rows; ++i) {
    float* d = r.dW + (o0 + i) * r.in + i0;
    if (ncols == kNr) {
      _mm256_storeu_ps(d, _mm256_loadu_ps(s + i * kNr));
      _mm256_storeu_ps(d + 8, _mm256_loadu_ps(s + i * kNr + 8));
    } else {
      _mm256_maskstore_ps(d, lanes_avx2(cols, 0), _mm256_loadu_ps(s + i * kNr));
      _mm256_maskstore_ps(d + 8, lanes_avx2(cols, 1), _mm256_loadu_ps(s + i * kNr + 8));
    }
  }
}

}  // namespace

int grad_tree_buffers(const std::vector<GradTreeStep>& steps, size_t extra, bool& init_from_dw) {
  int n = 1;
  for (const GradTreeStep& s : steps) {
    n = std::max(n, s.dst + 1);
    for (int k : s.adds) n = std::max(n, k + 1);
  }
  std::vector<bool> written(size_t(n), false);
  init_from_dw = false;
  auto read = [&](int k) {
    AR_CHECK(k >= -int(extra) && k < n, "weight-gradient tree: addend index " + std::to_string(k) + " out of range");
    if (k < 0) return;
    if (k == 0 && !written[0]) init_from_dw = true;
    AR_CHECK(k == 0 || written[size_t(k)], "weight-gradient tree: scratch buffer " + std::to_string(k) + " read before written");
  };
  for (const GradTreeStep& s : steps) {
    AR_CHECK(s.dst >= 0, "weight-gradient tree: a step writes buffer " + std::to_string(s.dst));
    if (s.accumulate) read(s.dst);
    for (int k : s.adds) read(k);
    written[size_t(s.dst)] = true;
  }
  AR_CHECK(written[0], "weight-gradient tree: no step writes the result");
  return n;
}

bool weight_grad_tree_f32_supported() { return kernel_isa() >= Isa::avx2; }

void weight_grad_tree_f32(Context& ctx, const std::vector<GradLeafF32>& leaves, const std::vector<GradTreeStep>& steps,
                          Addends extra, int64_t out, int64_t in, float* dW) {
  AR_CHECK(weight_grad_tree_f32_supported(), "weight_grad_tree_f32 needs AVX2");
  AR_CHECK(steps.size() == leaves.size() && !steps.empty(),
           "weight_grad_tree_f32: " + std::to_string(steps.size()) + " steps for " + std::to_string(leaves.size()) +
               " leaves");
  if (out <= 0 || in <= 0) return;
  bool init_from_dw = false;
  const int buffers = grad_tree_buffers(steps, extra.size(), init_from_dw);
  const size_t L = leaves.size();
  const int64_t panels = (in + kNr - 1) / kNr, tiles = (out + kMr - 1) / kMr;
  std::vector<int64_t> aoff(L + 1), boff(L + 1);
  for (size_t l = 0; l < L; ++l) {
    const int64_t n = std::max<int64_t>(leaves[l].rows, 0);
    aoff[l + 1] = aoff[l] + n * tiles * kMr;
    boff[l + 1] = boff[l] + n * kNr;
  }
  Tensor apack = Tensor::empty({std::max<int64_t>(aoff[L], 1)}, DType::F32, ctx);
  std::vector<const float*> a(L);
  for (size_t l = 0; l < L; ++l) {
    float* dst = apack.f32() + aoff[l];
    a[l] = dst;
    const int64_t n = std::max<int64_t>(leaves[l].rows, 0);
    for (int64_t q = 0; q < tiles; ++q)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < kMr; ++i) {
          const int64_t o = q * kMr + i;
          dst[(q * n + t) * kMr + i] = o < out ? leaves[l].dy[t * out + o] : 0.f;
        }
  }
  // Each unit a run of 16-column panels, all of its x packed first (panel q's leaf l at
  // B + (q - q0) * boff[L] + boff[l]); then blocks of output rows whose dy (every leaf's) stays in L2
  // while the unit's panels pass: dy is read once per panel block, x once per row block.
  const int64_t units = std::min<int64_t>(ctx.pool().size(), panels);
  const int64_t per_unit = (panels + units - 1) / units;
  const int64_t tiles_floats = (buffers + int64_t(extra.size())) * kTile;
  const int64_t unit_floats = tiles_floats + std::max<int64_t>(per_unit * boff[L], 1);
  const int64_t row_block = std::max<int64_t>(kMr, (kL2Floats / std::max<int64_t>(boff[L] / kNr, 1)) / kMr * kMr);
  Tensor scratch = Tensor::empty({units * unit_floats}, DType::F32, ctx);
  auto unit = [&](int64_t u) {
    float* tiles_s = scratch.f32() + u * unit_floats;
    float* B = tiles_s + tiles_floats;
    const int64_t q0 = panels * u / units, q1 = panels * (u + 1) / units;
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t i0 = q * kNr, cols = std::min(kNr, in - i0);
      for (size_t l = 0; l < L; ++l)
        for (int64_t t = 0; t < leaves[l].rows; ++t) {
          float* d = B + (q - q0) * boff[L] + boff[l] + t * kNr;
          std::copy_n(leaves[l].x + t * in + i0, cols, d);
          std::fill(d + cols, d + kNr, 0.f);
        }
    }
    std::vector<const float*> b(L);
    for (int64_t r0 = 0; r0 < out; r0 += row_block)
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t i0 = q * kNr, cols = std::min(kNr, in - i0);
        for (size_t l = 0; l < L; ++l) b[l] = B + (q - q0) * boff[L] + boff[l];
        const TreeRun run{&leaves, &steps, a.data(), b.data(), extra, out, in, dW, init_from_dw};
        for (int64_t o0 = r0; o0 < std::min(out, r0 + row_block); o0 += kMr) tile_avx2(run, o0, i0, cols, tiles_s, buffers);
      }
  };
  if (units == 1) return unit(0);
  ctx.pool().parallel_for(units, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) unit(u);
  }, 1);
}

}  // namespace ar::cpu
