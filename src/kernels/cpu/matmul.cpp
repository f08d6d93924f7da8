// Linear layers on the fp32 GEMM. Layout: x [n, in], W [out, in] (PyTorch order), y [n, out].
// Forward y = x W^T (+ b); backward dx = dy W, dW += dy^T x, db += column sums of dy.
// The GEMM by level: oneDNN's brgemm for large dense products from AVX-512 on (matmul_dnnl.cpp); our
// FMA-chain kernel at AVX2 (sgemm_fma.h: bits independent of the split); otherwise single-threaded
// OpenBLAS on units of C spread over the context's pool (core/context.h), chosen so that every element
// sees the same kernel and K order whatever the thread count.
// Reference: kernels/ref/matmul_ref.h.
#include <cblas.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sgemm_fma.h"

namespace ar::cpu {

namespace {
constexpr double kDnnlMinWork = double(int64_t(1) << 22);
}  // namespace

namespace {
// At the AVX2 level: our FMA-chain kernel (sgemm_fma.h), whose bits do not depend on how the product is
// split, so the split follows the threads: 16-column panels (each thread packs only its own part of
// op(B)), or 6-row tiles for a transposed op(A) and for products too narrow to share by columns.
void gemm_fma_units(Context& ctx, bool serial, const SgemmFmaArgs& g) {
  const int64_t threads = serial ? 1 : ctx.pool().size();
  const int64_t panels = (g.N + 15) / 16, tiles = (g.M + 5) / 6;
  const bool small = double(g.M) * double(g.N) * double(g.K) < double(int64_t(1) << 17);
  // op(A) = A^T is packed per block of rows (dW = dy^T x): threads take rows, each packing its own.
  const bool by_cols = (panels >= 4 * threads || panels >= tiles) && !(g.ta && tiles >= 4 * threads);
  const int64_t units = threads == 1 || small ? 1 : std::min(threads, by_cols ? panels : tiles);
  // One scratch for all units, taken once on the calling thread.
  const int64_t per = sgemm_fma_scratch(g.K);
  Tensor scratch = Tensor::empty({units * per}, DType::F32, ctx);
  auto unit = [&](int64_t u) {
    float* s = scratch.f32() + u * per;
    if (units == 1) return sgemm_fma_avx2(g, 0, g.M, 0, g.N, s);
    if (by_cols)
      return sgemm_fma_avx2(g, 0, g.M, std::min(g.N, panels * u / units * 16),
                            std::min(g.N, panels * (u + 1) / units * 16), s);
    sgemm_fma_avx2(g, std::min(g.M, tiles * u / units * 6), std::min(g.M, tiles * (u + 1) / units * 6), 0, g.N, s);
  };
  if (units == 1) return unit(0);
  ctx.pool().parallel_for(units, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) unit(u);
  });
}

// The units of one GEMM on ctx's pool, or all on the calling thread (serial): the same bits either way.
void gemm_units(Context& ctx, bool serial, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add = {},
                const PackedF32* packed = nullptr) {
  if (M == 0 || N == 0) return;
  if (packed && packed->packed() && kernel_isa() == Isa::avx2) {
    AR_CHECK(packed->K() == K && packed->N() == N, "gemm: a packed operand of another shape");
    SgemmFmaArgs g{ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add};
    g.packed_b = packed->panels();
    return gemm_fma_units(ctx, serial, g);
  }
  // oneDNN's brgemm for large products on dense operands; strided sub-matrices (attention's heads) would
  // get its gemm:jit kernels, which allocate packing buffers on every call: OpenBLAS takes those, and
  // every product where oneDNN's fp32 matmul is not brgemm (below AVX-512: gemm:jit's per-call buffers
  // are fresh mappings under the CLI's mmap threshold; the 256-token units of the tuning ran at half
  // speed on two threads, page faults and the mmap lock, bench/gemm_bench under AR_CPU_ISA=avx2).
  const bool dense = (ta ? lda == M : lda == K) && (tb ? ldb == K : ldb == N);
  if (dnnl_f32_is_brgemm() && dense && double(M) * double(N) * double(K) >= kDnnlMinWork)
    return gemm_f32_dnnl(ctx, serial, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add);
  if (kernel_isa() == Isa::avx2)
    return gemm_fma_units(ctx, serial, {ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add});
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);  // ReplicaGroup::run sets it first
  // One call: C = alpha op(A) op(B) + beta C for rows m0.. and columns n0.. (a, b already offset).
  auto call = [&](int64_t rows, int64_t cols, const float* a, const float* b, float* c) {
    const auto op_a = ta ? CblasTrans : CblasNoTrans, op_b = tb ? CblasTrans : CblasNoTrans;
    const int64_t off = c - C;  // of this call's block in C and in the addends
    if (beta == 0.f) {
      cblas_sgemm(CblasRowMajor, op_a, op_b, int(rows), int(cols), int(K), alpha, a, int(lda), b, int(ldb), 0.f, c,
                  int(ldc));
    } else {
      Tensor pt = Tensor::empty({rows * cols}, DType::F32, ctx);  // the finished product, then one addition
      float* P = pt.f32();
      cblas_sgemm(CblasRowMajor, op_a, op_b, int(rows), int(cols), int(K), alpha, a, int(lda), b, int(ldb), 0.f, P,
                  int(cols));
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = beta * c[i * ldc + j] + P[i * cols + j];
    }
    for (const float* m : add)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] += m[off + i * ldc + j];
  };
  auto run = [&](int64_t m0, int64_t m1) {
    const float* a = ta ? A + m0 : A + m0 * lda;  // row m of op(A): column m of A when transposed
    call(m1 - m0, N, a, B, C + m0 * ldc);
  };
  // Units of at least 256 rows (or, for short M such as decoding, columns) and 2^20 multiply-adds, in
  // multiples of 16. Each unit is its own SGEMM call whatever the thread count (threads only decide who
  // runs which units): some OpenBLAS kernels (measured on AMD EPYC) round an element differently
  // depending on the call's extent, so merging units per thread would make the bits depend on the
  // thread count. 256 because every call packs the whole other operand again: 16-row units ran at 57%
  // of one call's rate, 256-row units at 95% (2048^3, one thread). No unit is ever a small product
  // (M N K <= 64^3), which OpenBLAS computes on another path with other rounding.
  constexpr int64_t kMinWork = int64_t(1) << 20, kMinExtent = 256;
  auto extent = [&](int64_t other) {
    return std::max<int64_t>(kMinExtent, (kMinWork / std::max<int64_t>(1, other * K) + 16) / 16 * 16);
  };
  // Units are equal shares with boundaries on multiples of 16, in even counts (multiples of 4 from 8
  // on), as the oneDNN path's plan (matmul_dnnl.cpp): a remainder left to the last unit, or an odd count,
  // idles the other threads meanwhile. A single unit's worth of work of at least 2^24 multiply-adds
  // (a K or V projection of one 256-token sample) is cut in two columns.
  auto even = [](int64_t units) { return units >= 8 ? units / 4 * 4 : units / 2 * 2; };
  auto bound = [](int64_t len, int64_t units, int64_t u) { return u >= units ? len : len * u / units / 16 * 16; };
  const int64_t row_units = even(M / extent(N));
  auto for_units = [&](int64_t units, const std::function<void(int64_t, int64_t)>& fn) {
    if (serial) fn(0, units);
    else ctx.pool().parallel_for(units, fn, 1);
  };
  if (row_units >= 2) {
    for_units(row_units, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) run(bound(M, row_units, u), bound(M, row_units, u + 1));
    });
    return;
  }
  int64_t col_units = even(N / extent(M));
  if (col_units < 2 && double(M) * double(N) * double(K) >= double(int64_t(1) << 24) && N >= 128)
    col_units = 2;
  if (col_units < 2) return run(0, M);
  for_units(col_units, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t n0 = bound(N, col_units, u), n1 = bound(N, col_units, u + 1);
      const float* b = tb ? B + n0 * ldb : B + n0;  // column n of op(B): row n of B when transposed
      call(M, n1 - n0, A, b, C + n0);
    }
  });
}
}  // namespace

void gemm(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add, const PackedF32* packed) {
  gemm_units(ctx, false, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add, packed);
}

void gemm_rows(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const SgemmFmaArgs g{ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, {}};
  if (kernel_isa() >= Isa::avx2) return gemm_fma_units(ctx, false, g);
  ctx.pool().parallel_for(M, [&](int64_t m0, int64_t m1) { sgemm_fma_ref(g, m0, m1, 0, N); }, 1);
}

bool PackedF32::useful() { return kernel_isa() == Isa::avx2; }

void PackedF32::pack(Context& ctx, const float* M, int64_t rows, int64_t cols, bool transposed) {
  K_ = transposed ? cols : rows;
  N_ = transposed ? rows : cols;
  if (!useful() || K_ == 0 || N_ == 0) {
    buf_ = Tensor();
    return;
  }
  const int64_t floats = sgemm_fma_packed_floats(K_, N_);
  if (!buf_.defined() || buf_.numel() != floats) buf_ = Tensor::empty({floats}, DType::F32, ctx);
  SgemmFmaArgs g;
  g.tb = transposed, g.K = K_, g.N = N_, g.B = M, g.ldb = cols;
  float* dst = buf_.f32();
  ctx.pool().parallel_for((N_ + 15) / 16, [&](int64_t p0, int64_t p1) { sgemm_fma_pack_b_avx2(g, p0, p1, dst); }, 4);
}

void gemm_serial(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_units(ctx, true, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void add_bias(Context& ctx, const float* b, float* y, int64_t n, int64_t out) {
  ctx.pool().parallel_for(n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] += b[o];
  }, 16);
}

void add_column_sums(Context& ctx, const float* dy, float* db, int64_t n, int64_t out) {
  // Split over output columns: each thread owns disjoint columns (deterministic order).
  ctx.pool().parallel_for(out, [&](int64_t o0, int64_t o1) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = o0; o < o1; ++o) db[o] += dy[r * out + o];
  }, 64);
}

void linear_fwd(Context& ctx, const float* x, const float* W, const float* b, float* y, int64_t n, int64_t in,
                int64_t out) {
  gemm(ctx, false, true, n, out, in, 1.f, x, in, W, in, 0.f, y, out);
  if (b) add_bias(ctx, b, y, n, out);
}

void linear_bwd(Context& ctx, const float* dy, const float* x, const float* W, float* dx, bool accumulate_dx, float* dW,
                float* db, int64_t n, int64_t in, int64_t out, bool accumulate_dW, Addends dW_add, PackedF32* xp) {
  if (dx) gemm(ctx, false, false, n, in, out, 1.f, dy, out, W, in, accumulate_dx ? 1.f : 0.f, dx, in);
  if (dW && xp && !xp->tried()) xp->pack(ctx, x, n, in, false);
  if (dW) gemm(ctx, true, false, out, in, n, 1.f, dy, out, x, in, accumulate_dW ? 1.f : 0.f, dW, in, dW_add, xp);
  if (db) add_column_sums(ctx, dy, db, n, out);
}

}  // namespace ar::cpu
