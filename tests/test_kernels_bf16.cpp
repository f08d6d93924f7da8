// bf16 groundwork kernels (kernels/cpu/bf16_ops.h): CPU detection, fp32 <-> bf16 conversion against the
// scalar reference (ar::f32_to_bf16, PyTorch's round to nearest even), oneDNN GEMMs against ref::gemm in
// double on the bf16-rounded operands, and bit-identical GEMM results for 1, 2 and 3 threads.
//
// GEMM tolerance, per element: with bf16 operands every product is exact in fp32 (8 + 8 significant
// bits), and a sum of K terms in fp32 in any order and blocking is off by at most gamma_K * sum|a b|,
// gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability, 3.1). With alpha and beta
// two more roundings: |C - C_ref| <= (K + 2) u (|alpha| sum_k |a_ik b_kj| + |beta C0_ij|) (x 1.01).
// The fp32 GEMM gets one more rounding per product, covered by the same (K + 2) u.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/matmul_ref.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {

#define AR_REQUIRE_BF16()                                                                            \
  if (!cpu::bf16_gemm_supported())                                                                   \
  GTEST_SKIP() << "no bf16 GEMMs here: " << cpu::bf16_support_summary()

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return h;
}

struct GemmShape {
  bool ta, tb;
  int64_t M, N, K;
  int64_t pad = 0;  // extra leading-dimension elements
};

// Stored extents (rows, leading dim) of A and B for op(A)[M,K], op(B)[K,N].
int64_t lda_of(const GemmShape& s) { return (s.ta ? s.M : s.K) + s.pad; }
int64_t ldb_of(const GemmShape& s) { return (s.tb ? s.K : s.N) + s.pad; }
size_t a_size(const GemmShape& s) { return size_t((s.ta ? s.K : s.M) * lda_of(s)); }
size_t b_size(const GemmShape& s) { return size_t((s.tb ? s.N : s.K) * ldb_of(s)); }

// Checks C against the double reference with the bound stated at the top. A and B are the operand
// values as the kernel saw them (bf16-rounded for gemm_bf16).
void expect_within_bound(const char* what, const GemmShape& s, float alpha, float beta, const std::vector<float>& A,
                         const std::vector<float>& B, const std::vector<float>& C0, const std::vector<float>& C) {
  const int64_t lda = lda_of(s), ldb = ldb_of(s), ldc = s.N + s.pad;
  const auto Ad = cast<double>(A), Bd = cast<double>(B);
  auto Cd = cast<double>(C0);
  ref::gemm<double>(s.ta, s.tb, s.M, s.N, s.K, alpha, Ad.data(), lda, Bd.data(), ldb, beta, Cd.data(), ldc);
  std::vector<double> absA(Ad.size()), absB(Bd.size());
  for (size_t i = 0; i < Ad.size(); ++i) absA[i] = std::abs(Ad[i]);
  for (size_t i = 0; i < Bd.size(); ++i) absB[i] = std::abs(Bd[i]);
  std::vector<double> mag(size_t(s.M * ldc), 0.0);
  ref::gemm<double>(s.ta, s.tb, s.M, s.N, s.K, std::abs(alpha), absA.data(), lda, absB.data(), ldb, 0.0, mag.data(),
                    ldc);
  const double u = std::ldexp(1.0, -24);
  int bad = 0;
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      const size_t e = size_t(i * ldc + j);
      const double bound = 1.01 * double(s.K + 2) * u * (mag[e] + std::abs(double(beta) * C0[e]));
      if (std::abs(double(C[e]) - Cd[e]) > bound && ++bad <= 5)
        ADD_FAILURE() << what << " ta=" << s.ta << " tb=" << s.tb << " M=" << s.M << " N=" << s.N << " K=" << s.K
                      << " C[" << i << "," << j << "] = " << C[e] << ", reference " << Cd[e] << ", bound " << bound;
    }
  // Padding columns of C are never written.
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = s.N; j < ldc; ++j) EXPECT_EQ(bits(C[size_t(i * ldc + j)]), bits(C0[size_t(i * ldc + j)]));
}

std::vector<GemmShape> all_transposes(int64_t M, int64_t N, int64_t K, int64_t pad = 0) {
  std::vector<GemmShape> v;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) v.push_back({ta, tb, M, N, K, pad});
  return v;
}

}  // namespace

TEST(Bf16Isa, MatchesProcCpuinfo) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) break;
  if (line.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  auto has = [&](const std::string& flag) { return (line + " ").find(" " + flag + " ") != std::string::npos; };
  const cpu::CpuIsa isa = cpu::cpu_features();
  const bool v3 = has("avx2") && has("fma") && has("bmi1") && has("bmi2") && has("f16c") && has("movbe") && has("abm");
  EXPECT_EQ(isa.avx2, v3);
  EXPECT_EQ(isa.avx512, v3 && has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq"));
  EXPECT_EQ(isa.avx512_bf16, isa.avx512 && has("avx512_bf16"));
  EXPECT_EQ(isa.amx_bf16, has("amx_bf16") && has("amx_tile"));
  if (!cpu::cpu_isa().avx512_bf16 && !cpu::cpu_isa().amx_bf16) {
    EXPECT_FALSE(cpu::bf16_gemm_supported());
  }
}

TEST(Bf16Convert, SpecialValuesMatchPyTorchRounding) {
  // {fp32 bits, bf16 bits} as torch.tensor([x]).to(torch.bfloat16) gives them.
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000, 0x3f80},  // 1
      {0x3f808000, 0x3f80},  // tie, even below: down
      {0x3f818000, 0x3f82},  // tie, odd below: up
      {0x3f808001, 0x3f81},  // just above the tie
      {0x3f807fff, 0x3f80},  // just below the tie
      {0xbf818000, 0xbf82},  // negative tie, odd: away from zero
      {0x7f7fffff, 0x7f80},  // largest finite float rounds to +inf
      {0xff7fffff, 0xff80},  // ... and to -inf
      {0x7f7f7fff, 0x7f7f},  // largest value that stays finite
      {0x7f800000, 0x7f80},  // +inf
      {0xff800000, 0xff80},  // -inf
      {0x7fc00000, 0x7fc0},  // quiet NaN
      {0x7f800001, 0x7fc0},  // signaling NaN, low payload: quieted
      {0xffa12345, 0xffe1},  // negative NaN keeps sign and top payload bits
      {0x00000000, 0x0000},  // +0
      {0x80000000, 0x8000},  // -0
      {0x00000001, 0x0000},  // smallest subnormal rounds to 0
      {0x00008000, 0x0000},  // subnormal tie, even: down
      {0x00018000, 0x0002},  // subnormal tie, odd: up
      {0x00008001, 0x0001},  // subnormal kept (no flush to zero)
      {0x807fffff, 0x8080},  // largest negative subnormal rounds up to the smallest normal
  };
  std::vector<float> src;
  for (const auto& c : cases) src.push_back(from_bits(c.first));
  // Repeat so that both the 16-wide and the tail code paths see every case.
  std::vector<float> big;
  for (int r = 0; r < 5; ++r) big.insert(big.end(), src.begin(), src.end());
  Context ctx(Device{}, 1);
  std::vector<uint16_t> got(big.size());
  cpu::fp32_to_bf16(ctx, big.data(), got.data(), int64_t(big.size()));
  for (size_t i = 0; i < big.size(); ++i) {
    const auto& c = cases[i % cases.size()];
    EXPECT_EQ(got[i], c.second) << std::hex << "fp32 0x" << c.first << " at " << std::dec << i;
    EXPECT_EQ(f32_to_bf16(from_bits(c.first)), c.second) << std::hex << "scalar reference, fp32 0x" << c.first;
  }
}

TEST(Bf16Convert, RandomBitPatternsMatchScalarReference) {
  // Every exponent with random mantissas and signs (NaNs, infinities and subnormals included), lengths
  // that are not multiples of the vector width, 1 to 3 threads.
  std::mt19937 rng(7);
  std::vector<float> src;
  for (uint32_t e = 0; e < 256; ++e)
    for (int r = 0; r < 4099; ++r) src.push_back(from_bits(uint32_t(rng() & 0x807fffffu) | e << 23));
  for (int t : {1, 2, 3}) {
    Context ctx(Device{}, t);
    for (size_t n : {size_t(1), size_t(15), size_t(17), src.size()}) {
      std::vector<uint16_t> got(n + 1, 0xabcd);
      cpu::fp32_to_bf16(ctx, src.data(), got.data(), int64_t(n));
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += got[i] != f32_to_bf16(src[i]);
      EXPECT_EQ(bad, 0u) << "threads " << t << " n " << n;
      EXPECT_EQ(got[n], 0xabcd) << "wrote past the end";
    }
  }
}

TEST(Bf16Convert, ToFp32IsExactForEveryPattern) {
  std::vector<uint16_t> src(65536 + 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(i);
  Context ctx(Device{}, 2);
  std::vector<float> got(src.size());
  cpu::bf16_to_fp32(ctx, src.data(), got.data(), int64_t(src.size()));
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(bits(got[i]), uint32_t(src[i]) << 16) << i;
  // Round trip: bf16 -> fp32 -> bf16 is the identity except that NaNs become quiet.
  std::vector<uint16_t> back(src.size());
  cpu::fp32_to_bf16(ctx, got.data(), back.data(), int64_t(got.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    const bool nan = (src[i] & 0x7fff) > 0x7f80;
    ASSERT_EQ(back[i], nan ? uint16_t(src[i] | 0x40) : src[i]) << i;
  }
}

TEST(Bf16Gemm, MatchesDoubleReferenceOnRoundedOperands) {
  AR_REQUIRE_BF16();
  Context ctx(Device{}, 2);
  std::vector<GemmShape> shapes;
  for (auto v : {all_transposes(37, 65, 129), all_transposes(1, 200, 300), all_transposes(5, 33, 7, 3),
                 all_transposes(256, 512, 512)})  // the last one runs as several units
    shapes.insert(shapes.end(), v.begin(), v.end());
  const std::pair<float, float> ab[] = {{1.f, 0.f}, {0.5f, 1.f}, {-1.5f, 0.75f}};
  uint32_t seed = 100;
  for (const auto& s : shapes)
    for (const auto& [alpha, beta] : ab) {
      if (s.M * s.N * s.K > (int64_t(1) << 24) && !(alpha == 1.f && beta == 0.f)) continue;  // keep it quick
      const auto Af = randn<float>(a_size(s), ++seed), Bf = randn<float>(b_size(s), ++seed);
      const auto C0 = randn<float>(size_t(s.M * (s.N + s.pad)), ++seed);
      const auto Ah = to_bf16(Af), Bh = to_bf16(Bf);
      std::vector<float> Ar(Ah.size()), Br(Bh.size());
      for (size_t i = 0; i < Ah.size(); ++i) Ar[i] = bf16_to_f32(Ah[i]);
      for (size_t i = 0; i < Bh.size(); ++i) Br[i] = bf16_to_f32(Bh[i]);
      auto C = C0;
      cpu::gemm_bf16(ctx, s.ta, s.tb, s.M, s.N, s.K, alpha, Ah.data(), lda_of(s), Bh.data(), ldb_of(s), beta,
                     C.data(), s.N + s.pad);
      expect_within_bound("gemm_bf16", s, alpha, beta, Ar, Br, C0, C);
    }
}

TEST(DnnlGemm, Fp32MatchesDoubleReference) {
  Context ctx(Device{}, 2);
  std::vector<GemmShape> shapes;
  for (auto v : {all_transposes(37, 65, 129), all_transposes(1, 200, 300), all_transposes(5, 33, 7, 3),
                 all_transposes(256, 512, 512)})
    shapes.insert(shapes.end(), v.begin(), v.end());
  uint32_t seed = 200;
  for (const auto& s : shapes) {
    const float alpha = s.M == 37 ? 0.5f : 1.f, beta = s.M == 37 ? 1.f : 0.f;
    const auto A = randn<float>(a_size(s), ++seed), B = randn<float>(b_size(s), ++seed);
    const auto C0 = randn<float>(size_t(s.M * (s.N + s.pad)), ++seed);
    auto C = C0;
    cpu::gemm_f32_dnnl(ctx, s.ta, s.tb, s.M, s.N, s.K, alpha, A.data(), lda_of(s), B.data(), ldb_of(s), beta, C.data(),
                       s.N + s.pad);
    expect_within_bound("gemm_f32_dnnl", s, alpha, beta, A, B, C0, C);
  }
}

TEST(Bf16Gemm, EmptyReductionScalesC) {
  AR_REQUIRE_BF16();
  Context ctx(Device{}, 1);
  std::vector<float> C = {1.f, 2.f, 3.f, 4.f};
  cpu::gemm_bf16(ctx, false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  cpu::gemm_bf16(ctx, false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>(4, 0.f)));
}

// The --deterministic promise: the bits of C do not depend on the thread count. Shapes that split into
// several row units (A transposed) or column units (A not transposed), and short-M shapes (decoding).
TEST(Bf16Gemm, BitsIndependentOfThreadCount) {
  AR_REQUIRE_BF16();
  std::vector<GemmShape> shapes;
  for (auto v : {all_transposes(512, 384, 256), all_transposes(16, 2048, 2048), all_transposes(7, 8192, 1024),
                 all_transposes(1, 4096, 4096), all_transposes(300, 1000, 200, 5)})
    shapes.insert(shapes.end(), v.begin(), v.end());
  Context c1(Device{}, 1), c2(Device{}, 2), c3(Device{}, 3);
  uint32_t seed = 300;
  for (const auto& s : shapes) {
    const auto A = to_bf16(randn<float>(a_size(s), ++seed)), B = to_bf16(randn<float>(b_size(s), ++seed));
    const auto C0 = randn<float>(size_t(s.M * (s.N + s.pad)), ++seed);
    std::vector<std::vector<float>> out;
    for (Context* c : {&c1, &c2, &c3})
      for (float beta : {0.f, 1.f}) {
        auto C = C0;
        cpu::gemm_bf16(*c, s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda_of(s), B.data(), ldb_of(s), beta, C.data(),
                       s.N + s.pad);
        out.push_back(std::move(C));
      }
    for (size_t r = 2; r < out.size(); ++r)
      EXPECT_EQ(std::memcmp(out[r].data(), out[r % 2].data(), out[r].size() * 4), 0)
          << "threads " << r / 2 + 1 << " beta " << r % 2 << " ta=" << s.ta << " tb=" << s.tb << " M=" << s.M
          << " N=" << s.N << " K=" << s.K;
  }
}

TEST(DnnlGemm, Fp32BitsIndependentOfThreadCount) {
  Context c1(Device{}, 1), c2(Device{}, 2), c3(Device{}, 3);
  uint32_t seed = 400;
  std::vector<GemmShape> shapes;
  for (auto v : {all_transposes(512, 384, 256), all_transposes(16, 2048, 2048), all_transposes(3, 4096, 2048)})
    shapes.insert(shapes.end(), v.begin(), v.end());
  for (const auto& s : shapes) {
    const auto A = randn<float>(a_size(s), ++seed), B = randn<float>(b_size(s), ++seed);
    std::vector<std::vector<float>> out;
    for (Context* c : {&c1, &c2, &c3}) {
      std::vector<float> C(size_t(s.M * s.N));
      cpu::gemm_f32_dnnl(*c, s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda_of(s), B.data(), ldb_of(s), 0.f, C.data(),
                         s.N);
      out.push_back(std::move(C));
    }
    for (size_t r = 1; r < out.size(); ++r)
      EXPECT_EQ(std::memcmp(out[r].data(), out[0].data(), out[r].size() * 4), 0)
          << "threads " << r + 1 << " ta=" << s.ta << " tb=" << s.tb << " M=" << s.M << " N=" << s.N << " K=" << s.K;
  }
}

// A context makes each unit shape's oneDNN primitive once and reuses it: a GEMM run again adds no
// entry and has the bits it had, the bits of a fresh context; past the bound (512) the cache starts
// over and the first shape, made again, still has its bits. beta and an addend make entries of
// their own (another primitive), and give the bits they give in a fresh context.
TEST(DnnlGemm, UnitPrimitivesAreMadeOncePerShapeAndKeepTheBits) {
  Context ctx(Device{}, 2);
  const int64_t M = 1024, N = 512, K = 512;
  const auto A = randn<float>(size_t(M * K), 601), B = randn<float>(size_t(K * N), 602);
  const auto D = randn<float>(size_t(M * N), 603);
  auto run = [&](Context& c, float beta, bool add) {
    std::vector<float> C = D;
    std::vector<const float*> adds;
    if (add) adds.push_back(D.data());
    cpu::gemm_f32_dnnl(c, false, true, M, N, K, 1.f, A.data(), K, B.data(), K, beta, C.data(), N, adds);
    return C;
  };
  EXPECT_EQ(cpu::dnnl_cached_units(ctx), 0u);
  const auto first = run(ctx, 0.f, false);
  const size_t units = cpu::dnnl_cached_units(ctx);
  EXPECT_GE(units, 1u);
  EXPECT_LE(units, 2u);  // the plan's units have one size or two (kernels/cpu/matmul_dnnl.cpp, Plan)
  EXPECT_EQ(run(ctx, 0.f, false), first);
  EXPECT_EQ(cpu::dnnl_cached_units(ctx), units);
  for (float beta : {0.f, 1.f})
    for (bool add : {false, true}) {
      Context fresh(Device{}, 2);
      EXPECT_EQ(run(ctx, beta, add), run(fresh, beta, add)) << "beta " << beta << " add " << add;
    }
  const size_t with_post_ops = cpu::dnnl_cached_units(ctx);
  EXPECT_GT(with_post_ops, units);
  EXPECT_EQ(run(ctx, 1.f, true), run(ctx, 1.f, true));
  EXPECT_EQ(cpu::dnnl_cached_units(ctx), with_post_ops);
  // Past the bound: 520 one-unit shapes (M rows of 16 x 16).
  const auto a = randn<float>(size_t(520 * 16), 604), b = randn<float>(16 * 16, 605);
  std::vector<float> c(size_t(520 * 16));
  for (int64_t m = 1; m <= 520; ++m) {
    cpu::gemm_f32_dnnl(ctx, false, false, m, 16, 16, 1.f, a.data(), 16, b.data(), 16, 0.f, c.data(), 16);
    ASSERT_LE(cpu::dnnl_cached_units(ctx), 512u) << "M " << m;
  }
  EXPECT_EQ(run(ctx, 0.f, false), first);
}

// beta = 1 adds the finished product to C in one rounding: C + fl(op(A) op(B)), the bits of a product
// written with beta = 0 and then added; addends follow in order, one rounding each. The tuning's leaf
// tree relies on both to sum gradients inside the dW GEMMs (quant/signround.cpp): shapes of those
// products (K = one sample), on every path (oneDNN fp32 and bf16; OpenBLAS below oneDNN's minimum
// work, whose K blocks would otherwise add partial sums to C).
TEST(DnnlGemm, AccumulateAndAddendsAreOneAdditionEach) {
  Context ctx(Device{}, 2);
  uint32_t seed = 500;
  const std::vector<GemmShape> big = {{true, false, 2048, 2048, 512}, {true, false, 8192, 2048, 512},
                                  {true, false, 2048, 8192, 512}, {true, false, 512, 2048, 2048},
                                  {true, false, 300, 200, 700},   {true, false, 1024, 1024, 4096}};
  const std::vector<GemmShape> small = {{true, false, 64, 64, 512}, {false, false, 100, 50, 1000}, {false, true, 9, 7, 3000}};
  enum Path { kOpenBlas, kF32, kBf16 };
  for (Path path : {kOpenBlas, kF32, kBf16}) {
    if (path == kBf16 && !cpu::bf16_gemm_supported()) continue;
    for (const auto& s : path == kOpenBlas ? small : big) {
      const auto Af = randn<float>(a_size(s), ++seed), Bf = randn<float>(b_size(s), ++seed);
      const auto A = to_bf16(Af), B = to_bf16(Bf);
      const size_t n = size_t(s.M * s.N);
      const auto C0 = randn<float>(n, ++seed), X1 = randn<float>(n, ++seed), X2 = randn<float>(n, ++seed);
      const float* adds[] = {X1.data(), X2.data()};
      auto run = [&](float beta, float* out, cpu::Addends add) {
        if (path == kBf16)
          cpu::gemm_bf16(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda_of(s), B.data(), ldb_of(s), beta, out, s.N,
                         add);
        else if (path == kF32)
          cpu::gemm_f32_dnnl(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, Af.data(), lda_of(s), Bf.data(), ldb_of(s), beta,
                             out, s.N, add);
        else
          cpu::gemm(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, Af.data(), lda_of(s), Bf.data(), ldb_of(s), beta, out, s.N,
                    add);
      };
      std::vector<float> P(n), C = C0, CX = C0, PX(n, 3.f);
      run(0.f, P.data(), {});
      run(1.f, C.data(), {});
      run(1.f, CX.data(), adds);
      run(0.f, PX.data(), cpu::Addends(adds, 1));
      size_t bad = 0, bad_x = 0, bad_p = 0;
      for (size_t i = 0; i < n; ++i) {
        bad += bits(C[i]) != bits(C0[i] + P[i]);
        bad_x += bits(CX[i]) != bits((C0[i] + P[i]) + X1[i] + X2[i]);
        bad_p += bits(PX[i]) != bits(P[i] + X1[i]);
      }
      const char* names[] = {"openblas", "fp32", "bf16"};
      const std::string at = std::string(names[path]) + " M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                             " K=" + std::to_string(s.K);
      EXPECT_EQ(bad, 0u) << at;
      EXPECT_EQ(bad_x, 0u) << at << " (beta 1, two addends)";
      EXPECT_EQ(bad_p, 0u) << at << " (beta 0, one addend)";
    }
  }
}

// Without bf16 dot products gemm_bf16 refuses with Unsupported (run with oneDNN limited below bf16 by
// the next test; skipped where bf16 is available, as in a plain run here).
// pack_bf16.cpp's one-pass packing writes exactly the bytes of oneDNN's own reorder of the plain B into
// "BA16a64b2a", for both operands of a Linear (B = W^T and B = W), on several block counts.
TEST(Bf16Pack, BlockedWeightsEqualOneDnnReorder) {
  AR_REQUIRE_BF16();
  Context ctx(Device{}, 2);
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{64, 64}, {128, 192}, {192, 256}, {512, 64}}) {
    std::vector<uint16_t> W(size_t(out * in));
    for (size_t i = 0; i < W.size(); ++i) W[i] = uint16_t(i * 2654435761u >> 7);
    std::vector<uint16_t> WT(W.size());
    cpu::transpose_bf16(ctx, W.data(), WT.data(), out, in);
    for (bool transposed : {true, false}) {
      SCOPED_TRACE(std::to_string(out) + "x" + std::to_string(in) + (transposed ? " W^T" : " W"));
      const int64_t K = transposed ? in : out, N = transposed ? out : in;
      ASSERT_TRUE(cpu::blocked_layout_fits(K, N));
      using dnnl::memory;
      const memory::desc plain({K, N}, memory::data_type::bf16, memory::dims{N, 1});
      const memory::desc blocked({K, N}, memory::data_type::bf16, memory::format_tag::BA16a64b2a);
      ASSERT_EQ(blocked.get_size(), size_t(K * N * 2));
      std::vector<uint16_t> want(size_t(K * N)), got(size_t(K * N), 0xffff);
      memory src(plain, eng, transposed ? WT.data() : W.data()), dst(blocked, eng, want.data());
      dnnl::reorder(src, dst).execute(strm, src, dst);
      strm.wait();
      if (transposed) cpu::pack_wt_blocked(ctx, W.data(), out, in, got.data());
      else cpu::pack_w_blocked(ctx, W.data(), out, in, got.data());
      EXPECT_EQ(got, want);
    }
  }
  EXPECT_FALSE(cpu::blocked_layout_fits(48, 64));
  EXPECT_FALSE(cpu::blocked_layout_fits(64, 96));
}

TEST(Bf16Gemm, RefusesWithoutBf16) {
  if (cpu::bf16_gemm_supported()) GTEST_SKIP() << "bf16 available; exercised by RefusalWhenIsaLimited";
  Context ctx(Device{}, 1);
  std::vector<uint16_t> A(4, 0x3f80), B(4, 0x3f80);
  std::vector<float> C(4);
  try {
    cpu::gemm_bf16(ctx, false, false, 2, 2, 2, 1.f, A.data(), 2, B.data(), 2, 0.f, C.data(), 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("bf16 GEMM: "), std::string::npos) << e.what();
  }
}

TEST(Bf16Gemm, RefusalWhenIsaLimited) {
  AR_REQUIRE_BF16();
  // A fresh process of this test binary with oneDNN capped at AVX-512 without bf16.
  const std::string cmd = "ONEDNN_MAX_CPU_ISA=AVX512_CORE /proc/" + std::to_string(getpid()) +
                          "/exe --gtest_filter=Bf16Gemm.RefusesWithoutBf16 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  EXPECT_EQ(out.find("SKIPPED"), std::string::npos) << out;
}

// The producers that write GEMM operands in bf16 only give the fp32 kernel's values rounded by
// fp32_to_bf16, bit for bit (odd lengths: the blocks' and vectors' tails), on 1 and 2 threads.
TEST(Bf16Producers, EqualFp32KernelThenRounding) {
  const int64_t rows = 37, dim = 203, n = rows * dim;
  const auto x = cast<float>(randn<double>(size_t(n), 31, 2.0)), g = cast<float>(randn<double>(size_t(n), 32, 3.0)),
             u = cast<float>(randn<double>(size_t(n), 33)), da = cast<float>(randn<double>(size_t(n), 34));
  const auto w = cast<float>(randn<double>(size_t(dim), 35));
  for (int threads : {1, 2}) {
    Context ctx(Device{}, threads);
    auto rounded = [&](const std::vector<float>& f) {
      std::vector<uint16_t> b(f.size());
      cpu::fp32_to_bf16(ctx, f.data(), b.data(), int64_t(f.size()));
      return b;
    };
    const size_t N = static_cast<size_t>(n), R = static_cast<size_t>(rows);
    std::vector<float> y(N), rstd(R), rstd_b(R), a(N), dg(N), du(N);
    std::vector<uint16_t> yb(N), ab(N), dgb(N), dub(N);
    cpu::rmsnorm_fwd(ctx, x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6);
    cpu::rmsnorm_fwd_bf16(ctx, x.data(), w.data(), yb.data(), rstd_b.data(), rows, dim, 1e-6);
    EXPECT_EQ(yb, rounded(y)) << threads;
    EXPECT_EQ(rstd_b, rstd) << threads;
    cpu::swiglu_fwd(ctx, g.data(), u.data(), a.data(), n);
    cpu::swiglu_fwd_bf16(ctx, g.data(), u.data(), ab.data(), n);
    EXPECT_EQ(ab, rounded(a)) << threads;
    cpu::swiglu_bwd(ctx, da.data(), g.data(), u.data(), dg.data(), du.data(), n);
    cpu::swiglu_bwd_bf16(ctx, da.data(), g.data(), u.data(), dgb.data(), dub.data(), n);
    EXPECT_EQ(dgb, rounded(dg)) << threads;
    EXPECT_EQ(dub, rounded(du)) << threads;
    for (const GateAct gate : {GateAct{GateKind::ClampedSwiglu, 1.702f, 0.9f},  // gpt-oss's gate
                               GateAct{GateKind::GeluTanh}}) {                 // Gemma's
      cpu::swiglu_fwd(ctx, g.data(), u.data(), a.data(), n, gate);
      cpu::swiglu_fwd_bf16(ctx, g.data(), u.data(), ab.data(), n, gate);
      EXPECT_EQ(ab, rounded(a)) << threads;
      cpu::swiglu_bwd(ctx, da.data(), g.data(), u.data(), dg.data(), du.data(), n, gate);
      cpu::swiglu_bwd_bf16(ctx, da.data(), g.data(), u.data(), dgb.data(), dub.data(), n, gate);
      EXPECT_EQ(dgb, rounded(dg)) << threads;
      EXPECT_EQ(dub, rounded(du)) << threads;
    }
  }
}

// PackedB::pack_later: the pass runs at the first GEMM that takes the layout. A short product (a MoE
// expert's few routed rows) reads the plain operand and writes nothing; a long one packs; after a new
// source is given, the next long GEMM reads the new values. A GEMM on a deferred pack has the bits of
// one on an eager pack (PackedB::pack) of the same source, and those of the plain GEMM except under
// oneDNN's AMX kernel: there the bits depend on B's layout (the kernel sums K in blocks of another size
// when it packs B itself; 27% of this product's elements differ in the last bits on a Xeon with AMX),
// so there they are only near the plain GEMM's. Every GEMM of a given shape takes the same path
// (takes_layout: the shape alone decides), so the bits still do not depend on threads or the world.
TEST(PackedB, PackLaterPacksAtTheFirstGemmThatTakesTheLayout) {
  AR_REQUIRE_BF16();
  Context ctx(Device{}, 2);
  const int64_t out = 768, in = 2048, longM = 512, shortM = 32;  // a Qwen3-30B-A3B expert's gate
  std::vector<uint16_t> W(size_t(out * in)), W2(W.size()), x(size_t(longM * in));
  const auto wf = randn<float>(W.size(), 1), wf2 = randn<float>(W.size(), 2), xf = randn<float>(x.size(), 3);
  cpu::fp32_to_bf16(ctx, wf.data(), W.data(), int64_t(W.size()));
  cpu::fp32_to_bf16(ctx, wf2.data(), W2.data(), int64_t(W.size()));
  cpu::fp32_to_bf16(ctx, xf.data(), x.data(), int64_t(x.size()));
  auto plain = [&](const std::vector<uint16_t>& w, int64_t M) {
    std::vector<float> y(size_t(M * out));
    cpu::gemm_bf16(ctx, false, true, M, out, in, 1.f, x.data(), in, w.data(), in, 0.f, y.data(), out);
    return y;
  };
  cpu::PackedB p;
  p.pack_later(W.data(), out, in, true);
  EXPECT_FALSE(p.packed());
  std::vector<float> y(size_t(longM * out), -1.f);
  EXPECT_FALSE(cpu::gemm_bf16(ctx, false, shortM, 1.f, x.data(), in, p, 0.f, y.data(), out)) << "a short product";
  EXPECT_FALSE(p.packed()) << "a short product wrote the pack";
  EXPECT_EQ(y[0], -1.f);
  auto expect_bits_of = [&](const std::vector<uint16_t>& w, const char* what) {
    cpu::PackedB eager;
    eager.pack(ctx, w.data(), out, in, true);
    std::vector<float> ye(y.size(), -2.f);
    ASSERT_TRUE(cpu::gemm_bf16(ctx, false, longM, 1.f, x.data(), in, eager, 0.f, ye.data(), out));
    EXPECT_EQ(y, ye) << what;
    const std::vector<float> yp = plain(w, longM);
    if (cpu::kernel_isa() != cpu::Isa::amx) {
      EXPECT_EQ(y, yp) << what;
      return;
    }
    float worst = 0.f;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - yp[i]));
    EXPECT_LT(worst, 2e-4f) << what;  // values ~45 (2048 products of N(0,1)); measured: 1.5e-5, one ulp
  };
  ASSERT_TRUE(cpu::gemm_bf16(ctx, false, longM, 1.f, x.data(), in, p, 0.f, y.data(), out));
  EXPECT_TRUE(p.packed());
  expect_bits_of(W, "the first source");
  p.pack_later(W2.data(), out, in, true);
  EXPECT_FALSE(p.packed());
  ASSERT_TRUE(cpu::gemm_bf16(ctx, false, longM, 1.f, x.data(), in, p, 0.f, y.data(), out));
  expect_bits_of(W2, "the second source was not packed");
}
