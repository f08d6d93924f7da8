// Fake quantization (QDQ) of AutoRound's int formats: hand-computed cases, RTN against an independent
// plain implementation, the straight-through backward against finite differences of the same
// function with its rounding offsets and clamp decisions frozen at the evaluation point, and the
// threaded fp32 path against the reference.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/opt_rtn.h"
#include "quant/qdq.h"
#include "quant/sign_step.h"
#include "quant/sign_step_simd.h"
#include "test_util.h"

using namespace ar;
using namespace ar::quant;

namespace {
std::vector<double> run_fwd(const QdqShape& sh, const std::vector<double>& W, const double* V = nullptr,
                            const double* a = nullptr, const double* b = nullptr, std::vector<double>* scale = nullptr) {
  std::vector<double> lo(size_t(sh.out * sh.groups())), hi(lo.size()), out(W.size()), sc(lo.size()), z(lo.size());
  qdq_minmax<double>(sh, W.data(), lo.data(), hi.data(), 0, sh.out);
  qdq_fwd<double>(sh, W.data(), V, a, b, lo.data(), hi.data(), out.data(), sc.data(), z.data(), 0, sh.out);
  if (scale) *scale = sc;
  return out;
}

// Plain round-to-nearest, written independently of qdq_ref.h (alpha = beta = 1, V = 0).
std::vector<double> plain_rtn(const std::vector<double>& W, int64_t out, int64_t in, int64_t g, int bits, bool sym) {
  std::vector<double> r(W.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c0 = 0; c0 < in; c0 += g) {
      const int64_t c1 = std::min(in, c0 + g);
      double mn = 0, mx = 0;
      for (int64_t c = c0; c < c1; ++c) { mn = std::min(mn, W[size_t(o * in + c)]); mx = std::max(mx, W[size_t(o * in + c)]); }
      double s, z = 0, qlo, qhi;
      if (sym) {
        double m = std::ldexp(1.0, bits - 1);
        s = (-mn > mx) ? -mn / m : -mx / m;  // the larger side maps to code -m
        s = double(f16_to_f32(f32_to_f16(float(s))));
        if (std::abs(s) < 1e-5) s = s < 0 ? -1e-5 : 1e-5;
        qlo = -m; qhi = m - 1;
      } else {
        double M = std::ldexp(1.0, bits) - 1;
        s = std::max(double(f16_to_f32(f32_to_f16(float((mx - mn) / M)))), 1e-5);
        z = std::nearbyint(-mn / s);
        qlo = 0; qhi = M;
      }
      for (int64_t c = c0; c < c1; ++c) {
        double q = std::clamp(std::nearbyint(W[size_t(o * in + c)] / s) + z, qlo, qhi);
        r[size_t(o * in + c)] = s * (q - z);
      }
    }
  return r;
}
}  // namespace

TEST(Qdq, HandComputedFullRangeSymmetric) {
  QdqShape sh = make_qdq_shape(2, 4, 4, 4, true);
  // Row 0: |min| side larger -> positive scale 1/8; row 1: max side larger -> negative scale -1/8.
  std::vector<double> W = {-1.0, 0.5, 0.25, 0.0, 1.0, -0.5, 0.3, 0.0}, sc;
  auto q = run_fwd(sh, W, nullptr, nullptr, nullptr, &sc);
  EXPECT_EQ(sc[0], 0.125);
  EXPECT_EQ(sc[1], -0.125);
  EXPECT_EQ(q[0], -1.0);  // code -8
  EXPECT_EQ(q[4], 1.0);   // 1 / -0.125 = -8: the larger side takes code -8
  EXPECT_EQ(q[5], -0.5);
  EXPECT_EQ(q[6], 0.25);  // 0.3 / -0.125 = -2.4 -> -2 -> 0.25
}

TEST(Qdq, HandComputedAsymmetricAndPaddedGroup) {
  QdqShape sh = make_qdq_shape(1, 5, 2, 4, false);  // groups [0..3] and [4] (zero-padded)
  std::vector<double> W = {-1.0, 0.5, 2.0, 0.0, 0.7}, sc;
  auto q = run_fwd(sh, W, nullptr, nullptr, nullptr, &sc);
  EXPECT_EQ(sc[0], 1.0);  // (2 - (-1)) / 3
  EXPECT_EQ(q[0], -1.0);
  EXPECT_EQ(q[1], 0.0);   // 0.5 -> round-half-even(0.5) = 0 -> z 1 -> q 1 -> 0
  EXPECT_EQ(q[2], 2.0);
  EXPECT_NEAR(sc[1], 0.7 / 3, 1e-3);  // padding counts as 0: range [0, 0.7]
  EXPECT_NEAR(q[4], 0.7, 1e-3);
}

TEST(Qdq, RtnMatchesPlainImplementation) {
  for (bool sym : {true, false})
    for (int bits : {2, 3, 4, 8})
      for (int64_t g : {int64_t(-1), int64_t(32), int64_t(64), int64_t(128), int64_t(48)}) {
        const int64_t out = 7, in = 200;  // 200 is not a multiple of 32/64/128/48: padded last group
        auto W = test::randn<double>(size_t(out * in), uint32_t(bits * 10 + g), 0.05);
        QdqShape sh = make_qdq_shape(out, in, bits, g, sym);
        auto got = run_fwd(sh, W), want = plain_rtn(W, out, in, sh.group, bits, sym);
        for (size_t i = 0; i < W.size(); ++i) ASSERT_EQ(got[i], want[i]) << "sym " << sym << " bits " << bits << " g " << g << " i " << i;
      }
}

class QdqGrad : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(QdqGrad, SteBackwardMatchesFrozenFiniteDifferences) {
  auto [sym, bits] = GetParam();
  const int64_t out = 3, in = 24, g = 8;
  QdqShape sh = make_qdq_shape(out, in, bits, g, sym);
  const int64_t ng = sh.groups();
  // Each group holds one extreme of exactly +-2 (or +-2.5 asym) so that at alpha = beta = 0.75 the
  // scale is exact in fp16 (the fp16 cast has an identity gradient, the surrogate below omits it).
  auto W = test::randn<double>(size_t(out * in), 5, 0.6);
  for (int64_t r = 0; r < out; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      double ext = sym ? 2.0 : 2.5;
      for (int64_t c = gi * g; c < (gi + 1) * g; ++c) W[size_t(r * in + c)] = std::clamp(W[size_t(r * in + c)], -1.4, 1.4);
      W[size_t(r * in + gi * g)] = ((r + gi) % 2 ? ext : -ext);
      if (!sym) W[size_t(r * in + gi * g + 1)] = ((r + gi) % 2 ? -ext : ext);
    }
  auto V = test::randn<double>(size_t(out * ng * g), 6, 0.2);
  std::vector<double> a(size_t(out * ng), 0.75), b(a.size(), 0.75);
  auto R = test::randn<double>(W.size(), 7);
  std::vector<double> lo(a.size()), hi(a.size());
  qdq_minmax<double>(sh, W.data(), lo.data(), hi.data(), 0, out);
  // Analytic STE gradients.
  std::vector<double> dV(V.size()), da(a.size()), db(a.size());
  qdq_bwd<double>(sh, W.data(), V.data(), a.data(), b.data(), lo.data(), hi.data(), R.data(), dV.data(), da.data(),
                  db.data(), 0, out);
  // Freeze rounding residuals, clamp decisions and the sym branch at the base point.
  const double qlo = sym ? -std::ldexp(1.0, bits - 1) : 0, qhi = sym ? std::ldexp(1.0, bits - 1) - 1 : std::ldexp(1.0, bits) - 1;
  std::vector<double> cx(W.size()), qfix(W.size()), cz(a.size());
  std::vector<int> inside(W.size()), from_min(a.size());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t k = r * ng + gi;
      auto gs = group_scale<double>(sh, a[size_t(k)], b[size_t(k)], lo[size_t(k)], hi[size_t(k)]);
      ASSERT_FALSE(gs.clamped);
      from_min[size_t(k)] = gs.from_min;
      if (!sym) cz[size_t(k)] = gs.z - (-a[size_t(k)] * lo[size_t(k)] / gs.s);
      for (int64_t c = gi * g; c < (gi + 1) * g; ++c) {
        const size_t i = size_t(r * in + c);
        double x = W[i] / gs.s + V[size_t(r * ng * g + c)];
        cx[i] = std::nearbyint(x) - x;
        double q = std::nearbyint(x) + gs.z;
        inside[i] = q >= qlo && q <= qhi;
        qfix[i] = std::clamp(q, qlo, qhi);
      }
    }
  auto surrogate = [&] {
    double L = 0;
    for (int64_t r = 0; r < out; ++r)
      for (int64_t gi = 0; gi < ng; ++gi) {
        const int64_t k = r * ng + gi;
        double A = clamp01(a[size_t(k)]), B = clamp01(b[size_t(k)]), s, z = 0;
        if (sym) {
          double m = std::ldexp(1.0, bits - 1);
          s = from_min[size_t(k)] ? -A * lo[size_t(k)] / m : -B * hi[size_t(k)] / m;
        } else {
          s = (B * hi[size_t(k)] - A * lo[size_t(k)]) / qhi;
          z = -A * lo[size_t(k)] / s + cz[size_t(k)];
        }
        for (int64_t c = gi * g; c < (gi + 1) * g; ++c) {
          const size_t i = size_t(r * in + c);
          double q = inside[i] ? W[i] / s + V[size_t(r * ng * g + c)] + cx[i] + z : qfix[i];
          L += R[i] * s * (q - z);
        }
      }
    return L;
  };
  test::expect_grad_matches_fd("dV", V, dV, surrogate, 1e-6, 200);
  test::expect_grad_matches_fd("dalpha", a, da, surrogate, 1e-6, 200);
  test::expect_grad_matches_fd("dbeta", b, db, surrogate, 1e-6, 200);
  double nz = 0;
  for (double x : da) nz += std::abs(x);
  for (double x : db) nz += std::abs(x);
  EXPECT_GT(nz, 0.0);  // the scale gradients are exercised, not trivially zero
}

INSTANTIATE_TEST_SUITE_P(Formats, QdqGrad,
                         ::testing::Values(std::make_tuple(true, 2), std::make_tuple(true, 3), std::make_tuple(true, 4),
                                           std::make_tuple(true, 8), std::make_tuple(false, 2),
                                           std::make_tuple(false, 4)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) ? "sym" : "asym") + std::to_string(std::get<1>(p.param));
                         });

TEST(Qdq, ThreadedFp32EqualsSerialAndTracksDouble) {
  Context ctx(Device{}, 2);
  const int64_t out = 64, in = 256;
  QdqShape sh = make_qdq_shape(out, in, 4, 128, true);
  auto Wd = test::randn<double>(size_t(out * in), 9, 0.02);
  auto W = test::cast<float>(Wd);
  const size_t ng = size_t(out * sh.groups());
  auto V = test::cast<float>(test::randn<double>(size_t(out * sh.groups() * sh.group), 10, 0.3));
  std::vector<float> a(ng, 0.9f), b(ng, 0.8f), lo(ng), hi(ng), q1(W.size()), q2(W.size()), s1(ng), s2(ng);
  qdq_minmax(ctx, sh, W.data(), lo.data(), hi.data());
  qdq_fwd(ctx, sh, W.data(), V.data(), a.data(), b.data(), lo.data(), hi.data(), q1.data(), s1.data(), nullptr);
  qdq_fwd<float>(sh, W.data(), V.data(), a.data(), b.data(), lo.data(), hi.data(), q2.data(), s2.data(), nullptr, 0, out);
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(s1, s2);
  // fp32 vs double on the same inputs: codes may differ only where w/s + v sits at a rounding tie.
  auto Wdd = test::cast<double>(W), Vd = test::cast<double>(V), ad = test::cast<double>(a), bd = test::cast<double>(b);
  auto qd = run_fwd(sh, Wdd, Vd.data(), ad.data(), bd.data());
  size_t diff = 0;
  for (size_t i = 0; i < qd.size(); ++i) diff += std::abs(double(q1[i]) - qd[i]) > 1e-6 * std::abs(qd[i]) + 1e-9;
  EXPECT_LE(diff, qd.size() / 1000);
}

// The fp32 backward's paths (16 columns at a time on AVX-512 or AVX2, and scalar) give the reference
// template's bits on every ISA level:
// every group size (tails of 1..15 columns, a ragged last group, one group per row), sym and asym,
// clamped codes (large V), and the optional inputs and outputs left out.
TEST(Qdq, Fp32BackwardRowsEqualReferenceBits) {
  struct Case {
    int64_t out, in, group;
    int bits;
    bool sym, with_v, with_ab, with_dv;
  };
  const Case cases[] = {{16, 256, 128, 4, false, true, true, true}, {9, 100, 32, 3, true, true, true, true},
                        {6, 120, 24, 4, false, true, true, true},    {4, 64, 9, 4, true, true, true, true},
                        {5, 37, -1, 2, false, true, false, true},    {7, 70, 16, 8, true, false, true, false},
                        {3, 1, 1, 4, false, true, true, true},       {11, 131, 33, 4, false, true, true, true}};
  uint32_t seed = 40;
  for (const Case& k : cases) {
    const QdqShape sh = make_qdq_shape(k.out, k.in, k.bits, k.group, k.sym);
    const int64_t ng = sh.out * sh.groups(), vw = sh.groups() * sh.group;
    auto W = test::cast<float>(test::randn<double>(size_t(sh.out * sh.in), ++seed, 0.05));
    auto V = test::cast<float>(test::randn<double>(size_t(sh.out * vw), ++seed, 0.4));
    auto dW = test::cast<float>(test::randn<double>(W.size(), ++seed, 1.0));
    auto a = test::cast<float>(test::randn<double>(size_t(ng), ++seed, 0.3)), b = a;
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] += 0.9f;  // some outside [0, 1]: clamped, zero gradient
      b[i] = 1.7f - a[i];
    }
    std::vector<float> lo(static_cast<size_t>(ng)), hi(lo.size());
    qdq_minmax<float>(sh, W.data(), lo.data(), hi.data(), 0, sh.out);
    std::vector<float> dV1(static_cast<size_t>(sh.out * vw), 5.f), dV2 = dV1, da1(lo.size()), da2 = da1, db1 = da1,
                                                                   db2 = da1;
    const float* v = k.with_v ? V.data() : nullptr;
    const float *pa = k.with_ab ? a.data() : nullptr, *pb = k.with_ab ? b.data() : nullptr;
    qdq_bwd<float>(sh, W.data(), v, pa, pb, lo.data(), hi.data(), dW.data(), k.with_dv ? dV1.data() : nullptr,
                   da1.data(), db1.data(), 0, sh.out);
    for (cpu::Isa level : cpu::kIsaLevels) {  // every path this process may run (the machine, or the cap)
      if (level > cpu::kernel_isa()) break;
      std::fill(dV2.begin(), dV2.end(), 5.f);
      qdq_bwd_rows(sh, W.data(), v, pa, pb, lo.data(), hi.data(), dW.data(), k.with_dv ? dV2.data() : nullptr,
                   da2.data(), db2.data(), 0, sh.out, level);
      const std::string at = std::string(cpu::isa_name(level)) + " out " + std::to_string(k.out) + " in " +
                             std::to_string(k.in) + " g " + std::to_string(k.group);
      EXPECT_EQ(std::memcmp(dV1.data(), dV2.data(), dV1.size() * 4), 0) << at;
      EXPECT_EQ(std::memcmp(da1.data(), da2.data(), da1.size() * 4), 0) << at;
      EXPECT_EQ(std::memcmp(db1.data(), db2.data(), db1.size() * 4), 0) << at;
    }
  }
}

// The fp32 forward's paths (16 columns at a time on AVX-512, 8 on AVX2, and scalar) give the reference
// template's bits on every ISA level, with fp32 and bf16 (--amp) outputs: ragged groups and tails,
// sym and asym, clamped codes (large V), the optional inputs left out, exact ties of the rounding
// (w / s + v = k + 1/2: round half to even), and inf and NaN weights (clamped, and a NaN kept).
TEST(Qdq, Fp32ForwardRowsEqualReferenceBits) {
  struct Case {
    int64_t out, in, group;
    int bits;
    bool sym, with_v, with_ab, ties;
  };
  const Case cases[] = {{16, 256, 128, 4, false, true, true, false}, {9, 100, 32, 3, true, true, true, false},
                        {6, 120, 24, 4, false, true, true, false},   {4, 64, 9, 4, true, true, true, false},
                        {5, 37, -1, 2, false, true, false, false},   {7, 70, 16, 8, true, false, true, false},
                        {3, 1, 1, 4, false, true, true, false},      {11, 131, 33, 4, false, true, true, false},
                        {4, 64, 32, 4, true, true, false, true},     {4, 48, 24, 4, true, true, false, true}};
  uint32_t seed = 70;
  for (const Case& k : cases) {
    const QdqShape sh = make_qdq_shape(k.out, k.in, k.bits, k.group, k.sym);
    const int64_t ng = sh.out * sh.groups(), vw = sh.groups() * sh.group;
    auto W = test::cast<float>(test::randn<double>(size_t(sh.out * sh.in), ++seed, 0.05));
    auto V = test::cast<float>(test::randn<double>(size_t(sh.out * vw), ++seed, 0.4));
    if (k.ties) {  // sym 4-bit: w = j / 16 with max |w| = 1/2 in every group sets s = -1/16 exactly: w / s + 1/2 is a tie
      for (size_t i = 0; i < W.size(); ++i) W[i] = float(int64_t(i % 17) - 8) / 16.f;
      std::fill(V.begin(), V.end(), 0.5f);
    }
    W[W.size() / 3] = INFINITY;  // its group's scale and codes go with it, on every path alike
    W[W.size() / 2] = std::nanf("");
    auto a = test::cast<float>(test::randn<double>(size_t(ng), ++seed, 0.3)), b = a;
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] += 0.9f;
      b[i] = 1.7f - a[i];
    }
    std::vector<float> lo(static_cast<size_t>(ng)), hi(lo.size());
    qdq_minmax<float>(sh, W.data(), lo.data(), hi.data(), 0, sh.out);
    const float* v = k.with_v ? V.data() : nullptr;
    const float *pa = k.with_ab ? a.data() : nullptr, *pb = k.with_ab ? b.data() : nullptr;
    std::vector<float> y1(W.size()), s1(lo.size()), z1(lo.size());
    std::vector<uint16_t> h1(W.size());
    qdq_fwd<float>(sh, W.data(), v, pa, pb, lo.data(), hi.data(), y1.data(), s1.data(), z1.data(), 0, sh.out);
    qdq_fwd<float, uint16_t>(sh, W.data(), v, pa, pb, lo.data(), hi.data(), h1.data(), nullptr, nullptr, 0, sh.out);
    if (k.ties) {  // the ties are there, and went to even codes
      size_t even = 0;
      for (size_t i = 0; i < W.size(); ++i) even += std::isfinite(y1[i]) && std::fmod(std::abs(y1[i]) * 16.f, 2.f) == 0.f;
      EXPECT_GT(even, W.size() / 2) << "no tie rounded to even";
    }
    for (cpu::Isa level : cpu::kIsaLevels) {
      if (level > cpu::kernel_isa()) break;
      std::vector<float> y2(W.size(), 5.f), s2(lo.size()), z2(lo.size());
      std::vector<uint16_t> h2(W.size(), 5);
      qdq_fwd_rows(sh, W.data(), v, pa, pb, lo.data(), hi.data(), y2.data(), s2.data(), z2.data(), 0, sh.out, level);
      qdq_fwd_rows(sh, W.data(), v, pa, pb, lo.data(), hi.data(), h2.data(), nullptr, nullptr, 0, sh.out, level);
      const std::string at = std::string(cpu::isa_name(level)) + " out " + std::to_string(k.out) + " in " +
                             std::to_string(k.in) + " g " + std::to_string(k.group);
      EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << at;
      EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.size() * 2), 0) << at;
      EXPECT_EQ(std::memcmp(s1.data(), s2.data(), s1.size() * 4), 0) << at;
      EXPECT_EQ(std::memcmp(z1.data(), z2.data(), z1.size() * 4), 0) << at;
    }
  }
}

// SignRound's step over an array (sign_step_simd.cpp) gives quant/sign_step.h's scalar bits on every
// ISA level: zero, -0, NaN, infinite and subnormal gradients, coefficients stepped past 0 and 1, -0
// values, a zero rate, and lengths with tails; a non-finite gradient anywhere is reported.
TEST(SignStep, EveryLevelGivesTheScalarBits) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(37), int64_t(1000)})
    for (bool coef : {false, true})
      for (float rate : {0.005f, 0.f, 1e-40f}) {
        auto p0 = test::cast<float>(test::randn<double>(size_t(n), uint32_t(n + 90), coef ? 0.6 : 0.3));
        auto d = test::cast<float>(test::randn<double>(size_t(n), uint32_t(n + 91), 1.0));
        for (size_t i = 0; i < size_t(n); ++i) {
          if (coef) p0[i] += 0.5f;  // some outside [0, 1], some one step from an end
          if (i % 5 == 1) d[i] = 0.f;
          if (i % 7 == 2) d[i] = -0.f;
          if (i % 11 == 3) d[i] = 1e-42f;  // subnormal
          if (i % 13 == 4) p0[i] = -0.f;
        }
        for (bool bad : {false, true}) {
          std::vector<float> g = d;
          if (bad) g[size_t(n) - 1] = (n % 2) ? std::nanf("") : -INFINITY;  // the last: a tail on some levels
          std::vector<float> want = p0;
          bool ok_want = true;
          for (size_t i = 0; i < size_t(n); ++i) {
            ok_want &= std::isfinite(g[i]);
            want[i] = coef ? coef_step_value(want[i], g[i], rate) : sign_step_value(want[i], g[i], rate);
          }
          EXPECT_EQ(ok_want, !bad);
          for (cpu::Isa level : cpu::kIsaLevels) {
            if (level > cpu::kernel_isa()) break;
            std::vector<float> p = p0;
            const bool ok = sign_step_array(p.data(), g.data(), n, rate, coef, level);
            const std::string at = std::string(cpu::isa_name(level)) + " n " + std::to_string(n) + " coef " +
                                   std::to_string(coef) + " rate " + std::to_string(rate) + " bad " + std::to_string(bad);
            EXPECT_EQ(ok, ok_want) << at;
            EXPECT_EQ(std::memcmp(p.data(), want.data(), p.size() * 4), 0) << at;
          }
        }
      }
}

TEST(Qdq, RejectsUnsupportedBitsAndGroups) {
  EXPECT_THROW(make_qdq_shape(4, 64, 5, 32, true), Error);
  EXPECT_THROW(make_qdq_shape(4, 64, 4, 0, true), Error);
  EXPECT_THROW(make_qdq_shape(4, 64, 4, -2, true), Error);
  EXPECT_EQ(make_qdq_shape(4, 20, 4, 32, true).group, 20);  // a row shorter than g is one group
}

TEST(OptRtn, NeverWorseThanRtnAndBetterOnAverage) {
  Context ctx(Device{}, 2);
  for (int bits : {2, 3, 4}) {
    const int64_t out = 32, in = 128;
    QdqShape sh = make_qdq_shape(out, in, bits, 32, true);
    auto W = test::cast<float>(test::randn<double>(size_t(out * in), uint32_t(40 + bits), 0.05));
    auto imat = test::cast<float>(test::randn<double>(size_t(in), 77, 1.0));
    for (auto& v : imat) v = v * v + 0.01f;  // sums of squares: positive
    const size_t ng = size_t(out * sh.groups());
    std::vector<float> lo(ng), hi(ng), rtn(W.size()), opt(W.size()), s(ng);
    qdq_minmax(ctx, sh, W.data(), lo.data(), hi.data());
    qdq_fwd(ctx, sh, W.data(), nullptr, nullptr, nullptr, lo.data(), hi.data(), rtn.data(), nullptr, nullptr);
    opt_rtn_sym(ctx, sh, W.data(), imat.data(), opt.data(), s.data());
    // Per group the search includes the RTN scale, so the weighted error can only go down.
    for (int64_t r = 0; r < out; ++r)
      for (int64_t g = 0; g < sh.groups(); ++g) {
        double er = 0, eo = 0;
        for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
          const size_t i = size_t(r * in + c);
          er += imat[size_t(c)] * std::pow(double(rtn[i]) - W[i], 2);
          eo += imat[size_t(c)] * std::pow(double(opt[i]) - W[i], 2);
        }
        ASSERT_LE(eo, er * (1 + 1e-12)) << "bits " << bits << " row " << r << " group " << g;
      }
    const double e_rtn = weighted_error(sh, W.data(), rtn.data(), imat.data()),
                 e_opt = weighted_error(sh, W.data(), opt.data(), imat.data());
    EXPECT_LT(e_opt, 0.95 * e_rtn) << "bits " << bits;
    // Codes stay in range and What = scale * code exactly.
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const float sc = s[size_t(r * sh.groups() + c / 32)], q = opt[size_t(r * in + c)] / sc;
        ASSERT_EQ(q, std::nearbyint(q));
        ASSERT_GE(q, -(1 << (bits - 1)));
        ASSERT_LE(q, (1 << (bits - 1)) - 1);
      }
  }
}
