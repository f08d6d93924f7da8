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

// op(B) packed whole beforehand (two uneven runs of panels, as threads pack it), then read by blocks
// of C whose columns start on panels: the bits of the call that packs its own.
TEST_P(SgemmFma, PackedOpBGivesTheBitsOfTheCallThatPacksItsOwn) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 at this level (" << cpu::isa_name(cpu::kernel_isa()) << ")";
  const Case c = GetParam();
  const Operands o(c, 23);
  const std::vector<float> want = run_ref(c, o);
  std::vector<float> packed(size_t(std::max<int64_t>(1, cpu::sgemm_fma_packed_floats(c.K, c.N))), std::nanf(""));
  std::vector<float> got = o.C0;
  SgemmFmaArgs g = o.args(c, got.data());
  const int64_t panels = (c.N + 15) / 16, cut = panels / 3;
  cpu::sgemm_fma_pack_b_avx2(g, cut, panels, packed.data());
  cpu::sgemm_fma_pack_b_avx2(g, 0, cut, packed.data());
  g.packed_b = packed.data();
  g.B = nullptr;  // nothing reads B now
  std::vector<float> scratch(size_t(cpu::sgemm_fma_scratch(c.K)));
  const int64_t mc = c.M / 3 + 1, nc = 16 * (panels / 2 + 1);
  for (int64_t m0 = 0; m0 < c.M; m0 += mc)
    for (int64_t n0 = 0; n0 < c.N; n0 += nc)
      cpu::sgemm_fma_avx2(g, m0, std::min(c.M, m0 + mc), n0, std::min(c.N, n0 + nc), scratch.data());
  expect_same_bits(want, got, "packed op(B)");
}

INSTANTIATE_TEST_SUITE_P(Shapes, SgemmFma, ::testing::ValuesIn(cases()));

// cpu::PackedF32 through cpu::gemm and the Linear ops: the plain GEMM's bits on one and two threads,
// one pack read by several products; packs nothing on levels whose kernels do not read it.
TEST(CpuGemmPacked, PacksGiveThePlainBits) {
  const Case shapes[] = {{256, 200, 576, false, true, 1.f, 0.f, 0},    // a leaf's forward: B = W^T
                         {256, 576, 1536, false, false, 1.f, 1.f, 0},  // input gradient, accumulated: B = W
                         {200, 576, 256, true, false, 1.f, 1.f, 2}};   // dW = dy^T x with addends: B = x
  for (const Case& c : shapes) {
    const Operands o(c, 29);
    for (int threads : {1, 2}) {
      Context ctx(Device{}, threads);
      std::vector<float> want = o.C0, got = o.C0;
      cpu::gemm(ctx, c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, o.B.data(), o.ldb, c.beta, want.data(),
                o.ldc, o.add_ptrs);
      cpu::PackedF32 p;
      // op(B) from B's rows: B^T [N, K] for tb, else [K, N] (B's padded rows: ldb is the row length here)
      std::vector<float> dense(size_t(c.N * c.K));
      for (int64_t r = 0; r < (c.tb ? c.N : c.K); ++r)
        for (int64_t q = 0; q < (c.tb ? c.K : c.N); ++q)
          dense[size_t(r * (c.tb ? c.K : c.N) + q)] = o.B[size_t(r * o.ldb + q)];
      p.pack(ctx, dense.data(), c.tb ? c.N : c.K, c.tb ? c.K : c.N, c.tb);
      EXPECT_EQ(p.packed(), cpu::PackedF32::useful());
      EXPECT_EQ(p.K(), c.K);
      EXPECT_EQ(p.N(), c.N);
      for (int reads = 0; reads < 2; ++reads) {
        got = o.C0;
        cpu::gemm(ctx, c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A.data(), o.lda, dense.data(), c.tb ? c.K : c.N, c.beta,
                  got.data(), o.ldc, o.add_ptrs, &p);
        expect_same_bits(want, got, std::to_string(threads) + " threads, read " + std::to_string(reads));
      }
    }
  }
}

// Two Linears reading one x (q and k): the first weight gradient packs x, the second reads that pack;
// both give the bits of the plain backward.
TEST(CpuGemmPacked, LinearsSharingAnInputShareItsPack) {
  const int64_t n = 96, in = 200;
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto rnd = [&](int64_t k) {
    std::vector<float> v(static_cast<size_t>(k));
    for (float& x : v) x = nd(rng);
    return v;
  };
  const std::vector<float> x = rnd(n * in);
  Context ctx(Device{}, 2);
  cpu::PackedF32 xp;
  for (int64_t out : {72, 40}) {
    const std::vector<float> W = rnd(out * in), dy = rnd(n * out), dx0 = rnd(n * in), dW0 = rnd(out * in);
    std::vector<float> dx = dx0, dxp = dx0, dW = dW0, dWp = dW0;
    cpu::linear_bwd(ctx, dy.data(), x.data(), W.data(), dx.data(), true, dW.data(), nullptr, n, in, out);
    cpu::linear_bwd(ctx, dy.data(), x.data(), W.data(), dxp.data(), true, dWp.data(), nullptr, n, in, out, true, {}, &xp);
    EXPECT_TRUE(xp.tried());
    EXPECT_EQ(xp.packed(), cpu::PackedF32::useful());
    expect_same_bits(dx, dxp, "input gradient, out " + std::to_string(out));
    expect_same_bits(dW, dWp, "weight gradient, out " + std::to_string(out));
  }
}

}  // namespace
