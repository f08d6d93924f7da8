// The bf16 GEMM with row-independent bits (kernels/cpu/gemm_rows_bf16.cpp): its packs equal their
// definition, it is a GEMM (against double on the bf16 operands, with the bound of test_kernels_bf16.cpp:
// (K + 2) u (|alpha| sum |a b| + |beta c|)), and a row's bits are the same in a call of many rows, in
// calls of a few rows, and on one or two threads: what lets the tuner stack leaves' rows of a MoE expert.
// Skipped where the process has no AVX512_BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/ref/matmul_ref.h"
#include "test_util.h"

using namespace ar;

namespace {

#define AR_REQUIRE_ROWS_BF16()           \
  if (!cpu::gemm_rows_bf16_supported()) \
  GTEST_SKIP() << "no AVX512_BF16 at this level (" << cpu::isa_name(cpu::kernel_isa()) << ")"

struct Shape {
  bool tb;
  int64_t M, N, K;
};

// bf16 operands (random normals, rounded) with padded leading dimensions, and a C to accumulate into.
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<uint16_t> A, B;
  std::vector<float> C0;
  Operands(const Shape& s, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    lda = s.K + 3, ldb = (s.tb ? s.K : s.N) + 5, ldc = s.N + 7;
    A.resize(size_t(std::max<int64_t>(1, s.M * lda)));
    B.resize(size_t(std::max<int64_t>(1, (s.tb ? s.N : s.K) * ldb)));
    C0.resize(size_t(std::max<int64_t>(1, s.M * ldc)));
    for (auto& x : A) x = f32_to_bf16(nd(rng));
    for (auto& x : B) x = f32_to_bf16(nd(rng));
    for (auto& x : C0) x = nd(rng);
  }
};

void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  size_t diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff += std::memcmp(&want[i], &got[i], sizeof(float)) != 0;
  EXPECT_EQ(diff, 0u) << what;
}

TEST(GemmRowsBf16, PacksEqualTheirDefinition) {
  AR_REQUIRE_ROWS_BF16();
  for (bool tb : {false, true})
    for (int64_t K : {1, 2, 31, 32, 33, 64, 100})
      for (int64_t nr : {1, 17, 32}) {
        const Shape s{tb, 1, 40, K};
        const Operands o(s, uint32_t(K * 7 + nr));
        const size_t words = size_t((K + 1) / 2 * 32);
        std::vector<uint32_t> want(words, 1), got(words, 2);
        cpu::gemm_rows_bf16_pack_ref(tb, o.B.data(), o.ldb, K, 5, nr, want.data());
        cpu::gemm_rows_bf16_pack(tb, o.B.data(), o.ldb, K, 5, nr, got.data());
        EXPECT_EQ(want, got) << "tb " << tb << " K " << K << " nr " << nr;
      }
}

TEST(GemmRowsBf16, MatchesDoubleReferenceOnItsOperands) {
  AR_REQUIRE_ROWS_BF16();
  Context ctx(Device{}, 2);
  const Shape shapes[] = {{false, 1, 1, 1},    {true, 5, 7, 3},      {false, 13, 33, 64}, {true, 25, 70, 257},
                          {false, 40, 96, 768}, {true, 37, 64, 2048}, {true, 9, 11, 0}};
  const float ab[][2] = {{1.f, 0.f}, {1.f, 1.f}, {0.75f, 0.5f}};
  for (const Shape& s : shapes)
    for (const auto& x : ab) {
      const Operands o(s, 3);
      std::vector<float> C = o.C0;
      cpu::gemm_rows_bf16(ctx, s.tb, s.M, s.N, s.K, x[0], o.A.data(), o.lda, o.B.data(), o.ldb, x[1], C.data(), o.ldc);
      std::vector<double> Ad(o.A.size()), Bd(o.B.size()), absA(o.A.size()), absB(o.B.size());
      for (size_t i = 0; i < o.A.size(); ++i) Ad[i] = bf16_to_f32(o.A[i]), absA[i] = std::abs(Ad[i]);
      for (size_t i = 0; i < o.B.size(); ++i) Bd[i] = bf16_to_f32(o.B[i]), absB[i] = std::abs(Bd[i]);
      std::vector<double> want(o.C0.begin(), o.C0.end()), mag(o.C0.size(), 0.0);
      ref::gemm<double>(false, s.tb, s.M, s.N, s.K, x[0], Ad.data(), o.lda, Bd.data(), o.ldb, x[1], want.data(), o.ldc);
      ref::gemm<double>(false, s.tb, s.M, s.N, s.K, std::abs(x[0]), absA.data(), o.lda, absB.data(), o.ldb, 0.0,
                        mag.data(), o.ldc);
      const double u = std::ldexp(1.0, -24);
      for (int64_t i = 0; i < s.M; ++i) {
        for (int64_t j = 0; j < s.N; ++j) {
          const size_t e = size_t(i * o.ldc + j);
          const double bound = 1.01 * double(s.K + 2) * u * (mag[e] + std::abs(double(x[1]) * o.C0[e]));
          ASSERT_LE(std::abs(double(C[e]) - want[e]), bound)
              << "tb " << s.tb << " " << s.M << "x" << s.N << "x" << s.K << " at " << i << "," << j;
        }
        for (int64_t j = s.N; j < o.ldc && i * o.ldc + j < int64_t(C.size()); ++j)  // padding never written
          ASSERT_EQ(test::bits(C[size_t(i * o.ldc + j)]), test::bits(o.C0[size_t(i * o.ldc + j)]));
      }
    }
}

// A MoE expert's shapes (gate x W^T, its input gradient dy W accumulated), a 12-row tile's edges and an
// odd K: one call over all rows, calls of 1-29 rows (leaves' routed rows), one thread and two.
TEST(GemmRowsBf16, RowsOfAStackedCallHaveTheBitsOfTheirOwnCalls) {
  AR_REQUIRE_ROWS_BF16();
  const Shape shapes[] = {{true, 96, 192, 576}, {false, 96, 576, 192}, {true, 50, 45, 33}, {false, 31, 70, 1}};
  for (const Shape& s : shapes)
    for (float beta : {0.f, 1.f}) {
      const Operands o(s, 5);
      Context two(Device{}, 2), one(Device{}, 1);
      std::vector<float> want = o.C0;
      cpu::gemm_rows_bf16(two, s.tb, s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, beta, want.data(), o.ldc);
      std::vector<float> got = o.C0;
      for (int64_t m0 = 0, i = 0; m0 < s.M; ++i) {
        const int64_t m = std::min(s.M - m0, int64_t(1 + (i * 13 + 3) % 29));
        cpu::gemm_rows_bf16(i % 2 ? one : two, s.tb, m, s.N, s.K, 1.f, o.A.data() + m0 * o.lda, o.lda, o.B.data(),
                            o.ldb, beta, got.data() + m0 * o.ldc, o.ldc);
        m0 += m;
      }
      expect_same_bits(want, got, "tb " + std::to_string(s.tb) + " beta " + std::to_string(beta));
    }
}

}  // namespace
