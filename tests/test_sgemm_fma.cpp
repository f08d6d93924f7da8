// The FMA-chain GEMM (kernels/cpu/sgemm_fma.h): the AVX2 kernel gives the bits of its definition
// (sgemm_fma_ref: one std::fma chain per element, then the finishing roundings) on every layout, edge
// and depth, whatever block of C a call covers; the definition is a GEMM (against double); and at the
// AVX2 level cpu::gemm is this kernel on any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sgemm_fma.h"
#include "test_util.h"

using namespace ar;
using cpu::SgemmFmaArgs;

namespace {

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  float alpha, beta;
  int addends;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.M << "x" << c.N << "x" << c.K << (c.ta ? " ta" : "") << (c.tb ? " tb" : "") << " alpha " << c.alpha
      << " beta " << c.beta << " addends " << c.addends;
}

// Operands with padded leading dimensions (a kernel must not assume dense rows) and values whose
// products and sums round (so a different order or a missing fused step shows in the bits).
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C0;
  std::vector<std::vector<float>> add;
  std::vector<const float*> add_ptrs;

  explicit Operands(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto fill = [&](std::vector<float>& v, size_t n) {
      v.resize(n);
      for (float& x : v) x = nd(rng) * (1.f + 1e-3f * float(rng() % 1000));
    };
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    lda = a_cols + 3, ldb = b_cols + 5, ldc = c.N + 7;
    fill(A, size_t(std::max<int64_t>(1, a_rows * lda)));
    fill(B, size_t(std::max<int64_t>(1, b_rows * ldb)));
    fill(C0, size_t(std::max<int64_t>(1, c.M * ldc)));
    add.resize(size_t(c.addends));
    for (auto& m : add) fill(m, C0.size());
    for (auto& m : add) add_ptrs.push_back(m.data());
  }
  SgemmFmaArgs args(const Case& c, float* C) const {
    return {c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C, ldc, add_ptrs};
  }
};

// The bits of every element of C (the padding between rows included: nothing may be written there).
void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0 && diff++ == 0) first = i;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " elements differ, first at " << first << " (" << want[first]
                      << " vs " << got[first] << ")";
}

std::vector<float> run_ref(const Case& c, const Operands& o) {
  std::vector<float> C = o.C0;
  cpu::sgemm_fma_ref(o.args(c, C.data()), 0, c.M, 0, c.N);
  return C;
}

void run_avx2(const Case& c, const Operands& o, std::vector<float>& C, int64_t m0, int64_t m1, int64_t n0,
              int64_t n1) {
  std::vector<float> scratch(size_t(cpu::sgemm_fma_scratch(c.K)));
  cpu::sgemm_fma_avx2(o.args(c, C.data()), m0, m1, n0, n1, scratch.data());
}

bool have_avx2() { return cpu::kernel_isa() >= cpu::Isa::avx2; }

class SgemmFma : public ::testing::TestWithParam<Case> {};

// Edges of every blocking: the 6-row tile, the 16-column panel, the 256-column chunk, the 288-row
// block and the 256-deep slice (K = 257 and 600 take several slices; K = 0 none).
std::vector<Case> cases() {
  std::vector<Case> v;
  const int64_t shapes[][3] = {{1, 1, 1},     {5, 7, 3},      {6, 16, 8},    {7, 17, 9},    {13, 33, 64},
                               {37, 300, 40}, {300, 40, 257}, {290, 35, 33}, {12, 20, 600}, {9, 11, 0}};
  const float ab[][2] = {{1.f, 0.f}, {1.f, 1.f}, {0.75f, 0.5f}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (const auto& x : ab) v.push_back({s[0], s[1], s[2], bool(t & 1), bool(t & 2), x[0], x[1], t == 3 ? 2 : 0});
  return v;
}

TEST_P(SgemmFma, Avx2KernelGivesTheBitsOfOneFmaChainPerElement) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 at this level (" << cpu::isa_name(cpu::kernel_isa()) << ")";
  const Case c = GetParam();
  const Operands o(c, 7);
  const std::vector<float> want = run_ref(c, o);
  std::vector<float> got = o.C0;
  run_avx2(c, o, got, 0, c.M, 0, c.N);
  expect_same_bits(want, got, "whole C");
}

TEST_P(SgemmFma, BlocksOfCGiveTheBitsOfTheWhole) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 at this level (" << cpu::isa_name(cpu::kernel_isa()) << ")";
  const Case c = GetParam();
  const Operands o(c, 11);
  const std::vector<float> want = run_ref(c, o);
  // Uneven cuts that fall inside tiles and panels: the thread split of cpu::gemm is free.
  std::vector<float> got = o.C0;
  const int64_t mc = c.M / 3 + 1, nc = c.N / 2 + 3;
  for (int64_t m0 = 0; m0 < c.M; m0 += mc)
    for (int64_t n0 = 0; n0 < c.N; n0 += nc) run_avx2(c, o, got, m0, std::min(c.M, m0 + mc), n0, std::min(c.N, n0 + nc));
  expect_same_bits(want, got, "blocks");
}

TEST_P(SgemmFma, DefinitionIsTheGemmWithItsFinishingSteps) {
  const Case c = GetParam();
  const Operands o(c, 13);
  const std::vector<float> got = run_ref(c, o);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double p = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta ? o.A[size_t(k * o.lda + i)] : o.A[size_t(i * o.lda + k)];
        const double b = c.tb ? o.B[size_t(j * o.ldb + k)] : o.B[size_t(k * o.ldb + j)];
        p += a * b, mag += std::abs(a * b);
      }
      const size_t e = size_t(i * o.ldc + j);
      double want = c.alpha * p + (c.beta == 0.f ? 0.0 : c.beta * double(o.C0[e]));
      for (const auto& m : o.add) want += m[e], mag += std::abs(m[e]);
      ASSERT_NEAR(got[e], want, 1e-6 * (mag + std::abs(o.C0[e])) + 1e-30) << i << "," << j;
    }
  // Nothing between C's rows is touched.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < o.ldc && i * o.ldc + j < int64_t(got.size()); ++j)
      ASSERT_EQ(test::bits(got[size_t(i * o.ldc + j)]), test::bits(o.C0[size_t(i * o.ldc + j)]));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SgemmFma, ::testing::ValuesIn(cases()));

// cpu::gemm at the AVX2 level (the CI suite's avx2 cap) is this kernel: the definition's bits on one
// thread, on two, and serial inside a caller's chunk, for a tuning leaf's shapes.
TEST(CpuGemmAvx2, IsTheFmaChainOnEveryThreadCount) {
  if (cpu::kernel_isa() != cpu::Isa::avx2)
    GTEST_SKIP() << "cpu::gemm runs this kernel at the avx2 level only (this process: "
                 << cpu::isa_name(cpu::kernel_isa()) << "; the suite's avx2 cap runs it)";
  const Case shapes[] = {{256, 192, 576, false, true, 1.f, 0.f, 0},  // K/V projection of a 256-token leaf
                         {256, 576, 1536, false, false, 1.f, 1.f, 0},  // dx, accumulated
                         {576, 576, 256, true, false, 1.f, 1.f, 2},    // dW with the tree's addends
                         {40, 24, 64, false, true, 0.125f, 0.f, 0}};   // an attention product
  for (const Case& c : shapes) {
    const Operands o(c, 17);
    const std::vector<float> want = run_ref(c, o);
    for (int threads : {1, 2}) {
      Context ctx(Device{}, threads);
      std::vector<float> got = o.C0;
      cpu::gemm(ctx, c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, got.data(),
                o.ldc, o.add_ptrs);
      expect_same_bits(want, got, std::to_string(threads) + " threads");
      got = o.C0;
      if (c.addends == 0) {
        cpu::gemm_serial(ctx, c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta,
                         got.data(), o.ldc);
        expect_same_bits(want, got, "serial");
      }
    }
  }
}

// cpu::gemm_rows on every level (the AVX2 kernel, or the definition's loop under the scalar cap): the
// definition's bits on one and two threads, and a call over stacked rows gives each row the bits of a
// call over its own rows (what lets the tuner stack several leaves' rows of a MoE expert, cpu_ops.h).
TEST(CpuGemmRows, RowsOfAStackedCallHaveTheBitsOfTheirOwnCalls) {
  const Case shapes[] = {{96, 192, 576, false, true, 1.f, 0.f, 0},    // an expert's gate: x W^T
                         {96, 576, 192, false, false, 1.f, 1.f, 0},   // its input gradient, accumulated
                         {40, 24, 300, true, false, 1.f, 0.f, 0},     // op(A) = A^T
                         {33, 17, 0, false, false, 1.f, 0.f, 0}};     // no products
  for (const Case& c : shapes) {
    const Operands o(c, 19);
    const std::vector<float> want = run_ref(c, o);
    for (int threads : {1, 2}) {
      Context ctx(Device{}, threads);
      std::vector<float> got = o.C0;
      cpu::gemm_rows(ctx, c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta,
                     got.data(), o.ldc);
      expect_same_bits(want, got, "stacked, " + std::to_string(threads) + " threads");
      got = o.C0;  // the rows in uneven calls of their own (3, 1, 29, ... rows: leaves' routed rows)
      for (int64_t m0 = 0, i = 0; m0 < c.M; ++i) {
        const int64_t m = std::min(c.M - m0, int64_t(1 + (i * 13 + 3) % 29));
        const float* a = c.ta ? o.A.data() + m0 : o.A.data() + m0 * o.lda;
        cpu::gemm_rows(ctx, c.ta, c.tb, m, c.N, c.K, c.alpha, a, o.lda, o.B.data(), o.ldb, c.beta,
                       got.data() + m0 * o.ldc, o.ldc);
        m0 += m;
      }
      expect_same_bits(want, got, "row by row, " + std::to_string(threads) + " threads");
    }
  }
}

}  // namespace
