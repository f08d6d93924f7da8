// QDQ of the floating-point schemes (quant/qdq_fp.h):
//  - against AutoRound itself (tests/data/fp_goldens, made by tools/make_fp_goldens.py with the
//    auto-round 0.16.1 wheel): forward outputs and scales bit for bit, the STE gradients of V and
//    max_scale to fp32 rounding (torch sums in its own order);
//  - the element rounding against transcriptions of AutoRound's quant_element (MX) and cast_to_fp4
//    (NVFP4) in double, over dense probes;
//  - the all-zero tile (finite outputs and gradients where torch makes NaN), the tile shapes, refusals.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "core/small_float.h"
#include "quant/qdq_fp.h"
#include "golden_file.h"
#include "test_util.h"

using namespace ar;
using namespace ar::quant;

namespace {

using test::read_f32;

struct GoldenCase {
  const char* name;
  FpFamily family;
  FpElem elem;
  int64_t out, in, group, block_rows;
};
// The cases of tools/make_fp_goldens.py.
const GoldenCase kCases[] = {
    {"mxfp4", FpFamily::Mx, FpElem::E2M1, 6, 80, 32, 0},
    {"mxfp4_rceil", FpFamily::MxRceil, FpElem::E2M1, 6, 80, 32, 0},
    {"mxfp8", FpFamily::Mx, FpElem::E4M3, 4, 64, 32, 0},
    {"mxfp8_rceil", FpFamily::MxRceil, FpElem::E4M3, 4, 64, 32, 0},
    {"nvfp4", FpFamily::Nvfp4, FpElem::E2M1, 6, 40, 16, 0},
    {"fp8_channel", FpFamily::Fp8, FpElem::E4M3, 8, 48, -1, 0},
    {"fp8_tensor", FpFamily::Fp8, FpElem::E4M3, 8, 48, 0, 0},
    {"fp8_block", FpFamily::Fp8, FpElem::E4M3, 40, 72, 32, 32},
};

// |a - b| within `rel` of b (plus 1e-6 of the largest |b|, for values near 0). dV is a product of a
// few fp32 factors (2e-6); dbeta a per-tile sum whose two terms nearly cancel, which torch adds in
// fp32 in its own order (1e-3: a wrong formula is off by far more, a wrong mask shows in dV).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what, double rel) {
  double big = 0;
  for (float w : want) big = std::max(big, double(std::fabs(w)));
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = rel * std::fabs(want[i]) + 1e-6 * big;
    if (std::fabs(double(got[i]) - want[i]) > tol && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs AutoRound's " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// AutoRound's quant_element (mxfp.py) in double: private exponent, scale to mbits-2 integer bits,
// round half to even by floor(|x| + 0.5) - [(|x| - 0.5) mod 2 == 0], scale back, clamp.
double quant_element(double t, int ebits, int mbits, double max_norm) {
  const double pe = std::max(std::floor(std::log2(std::fabs(t) + (t == 0 ? 1 : 0))), -std::ldexp(1.0, ebits - 1) + 2);
  const double x = t / std::ldexp(1.0, int(pe)) * std::ldexp(1.0, mbits - 2);
  const double a = std::fabs(x);
  const double mask = std::fmod(a - 0.5, 2.0) == 0 ? 1 : 0;
  const double sign = x > 0 ? 1 : x < 0 ? -1 : 0;
  const double r = sign * (std::floor(a + 0.5) - mask) / std::ldexp(1.0, mbits - 2) * std::ldexp(1.0, int(pe));
  return std::clamp(r, -max_norm, max_norm);
}

// AutoRound's cast_to_fp4 (nvfp.py) in double: steps of 0.5 below 2, 1 below 4, else 2.
double cast_to_fp4(double x) {
  const double s = x > 0 ? 1 : x < 0 ? -1 : 0, a = std::fabs(x);
  const double r = a < 2 ? std::nearbyint(2 * a) / 2 : a < 4 ? std::nearbyint(a) : 2 * std::nearbyint(a / 2);
  return std::clamp(r, -6.0, 6.0) * s;
}

}  // namespace

TEST(QdqFp, MatchesAutoRoundForwardAndGradients) {
  const std::string path = std::string(AR_SOURCE_DIR) + "/tests/data/fp_goldens/qdq_fp.safetensors";
  auto f = SafetensorsFile::open(path);
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    FpQdqShape sh = make_fp_qdq_shape(c.family, c.elem, c.out, c.in, c.group, c.block_rows);
    const std::string p = std::string(c.name) + "/";
    const size_t n = size_t(c.out * c.in), nv = size_t(c.out * sh.padded_in()), nt = size_t(sh.tiles());
    auto W = read_f32(*f, p + "W", n), V = read_f32(*f, p + "V", nv), beta = read_f32(*f, p + "beta", nt);
    auto dWhat = read_f32(*f, p + "dWhat", n);
    if (c.family == FpFamily::Nvfp4) {
      sh.global_scale = read_f32(*f, p + "G", 1)[0];
      EXPECT_EQ(sh.global_scale, nvfp4_global_scale(W.data(), int64_t(n)));
    }
    std::vector<float> amax(nt), What(n), scale(nt), dV(nv, -7.f), dbeta(nt);
    fp_qdq_amax(sh, W.data(), amax.data());
    fp_qdq_fwd(sh, W.data(), V.data(), beta.data(), nullptr, amax.data(), What.data(), scale.data());
    const auto want_w = read_f32(*f, p + "What", n), want_s = read_f32(*f, p + "scale", nt);
    int diff = 0;
    for (size_t i = 0; i < n; ++i)
      if (What[i] != want_w[i] && ++diff <= 5)
        ADD_FAILURE() << "What[" << i << "] = " << What[i] << ", AutoRound's " << want_w[i] << " (w " << W[i] << ")";
    EXPECT_EQ(diff, 0);
    for (size_t t = 0; t < nt; ++t) EXPECT_EQ(scale[t], want_s[t]) << "tile " << t;

    fp_qdq_bwd(sh, W.data(), V.data(), beta.data(), nullptr, amax.data(), dWhat.data(), dV.data(), dbeta.data());
    auto want_dv = read_f32(*f, p + "dV", nv);
    for (int64_t r = 0; r < c.out; ++r)  // padding columns: untouched here, gradient 0 in torch
      for (int64_t col = c.in; col < sh.padded_in(); ++col) {
        EXPECT_EQ(dV[size_t(r * sh.padded_in() + col)], -7.f);
        EXPECT_EQ(want_dv[size_t(r * sh.padded_in() + col)], 0.f);
        dV[size_t(r * sh.padded_in() + col)] = 0;
      }
    expect_close(dV, want_dv, p + "dV", 2e-6);
    expect_close(dbeta, read_f32(*f, p + "dbeta", nt), p + "dbeta", 1e-3);
  }
}

TEST(QdqFp, ElementRoundingIsAutoRoundsQuantElement) {
  // Every bf16 value in range and the float neighbours of each grid midpoint.
  for (auto [elem, ebits, mbits, mn] : {std::tuple{FpElem::E2M1, 2, 3, 6.0}, std::tuple{FpElem::E4M3, 4, 5, 448.0}}) {
    std::vector<float> xs;
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float x = bf16_to_f32(uint16_t(h));
      if (std::isfinite(x) && std::fabs(x) <= mn) xs.push_back(x);
    }
    for (int c = 0; c < (elem == FpElem::E2M1 ? 8 : 0x7E); ++c) {
      const double lo = elem == FpElem::E2M1 ? e2m1_decode(uint8_t(c)) : e4m3_decode(uint8_t(c));
      const double hi = elem == FpElem::E2M1 ? e2m1_decode(uint8_t(c + 1)) : e4m3_decode(uint8_t(c + 1));
      const float mid = float((lo + hi) / 2);
      for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) xs.insert(xs.end(), {x, -x});
    }
    for (float x : xs) {
      const float mine = elem == FpElem::E2M1 ? e2m1_round(x) : e4m3_round(x);
      ASSERT_EQ(double(mine), quant_element(x, ebits, mbits, mn)) << "x = " << x << " ebits " << ebits;
      if (elem == FpElem::E2M1) {
        ASSERT_EQ(double(mine), cast_to_fp4(x)) << x;
      }
    }
  }
}

// The forward and backward (qdq_fp.cpp: element loops computed branch-free and vectorized) against
// their definition written plainly, element by element, with the tile's steps rebuilt from the scales
// it reports: What and dV bit for bit, dbeta from the scale's two sums in element order in double
// (beta_grad's formulas). Random weights, V on both sides of the rounding ties, every family, shapes
// that end in partial tiles.
TEST(QdqFp, VectorizedLoopsGiveTheBitsOfThePlainDefinition) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::uniform_real_distribution<float> vd(-0.5f, 0.5f);
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const int64_t out = c.out * 7 + 3, in = c.in * 3 + 5;
    FpQdqShape sh = make_fp_qdq_shape(c.family, c.elem, out, in, c.group, c.block_rows);
    const int64_t vw = sh.padded_in(), nt = sh.tiles();
    const size_t n = static_cast<size_t>(out * in), tiles = static_cast<size_t>(nt);
    std::vector<float> W(n), V(static_cast<size_t>(out * vw), 0.f), g(n), beta(tiles);
    for (float& x : W) x = nd(rng);
    for (int64_t r = 0; r < out; ++r)
      for (int64_t k = 0; k < in; ++k) V[size_t(r * vw + k)] = vd(rng);
    for (float& x : g) x = nd(rng);
    for (float& b : beta) b = 0.5f + 0.5f * std::fabs(vd(rng));
    if (c.family == FpFamily::Nvfp4) sh.global_scale = nvfp4_global_scale(W.data(), out * in);
    std::vector<float> amax(tiles), What(n), scale(tiles), dV(V.size(), 0.f), dbeta(tiles);
    fp_qdq_amax(sh, W.data(), amax.data());
    fp_qdq_fwd(sh, W.data(), V.data(), beta.data(), nullptr, amax.data(), What.data(), scale.data());
    fp_qdq_bwd(sh, W.data(), V.data(), beta.data(), nullptr, amax.data(), g.data(), dV.data(), dbeta.data());
    const float mn = sh.max_norm();
    int bad = 0;
    int64_t passing = 0;  // tiles whose scale passes a gradient
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t tr = t / sh.tiles_across(), tc = t % sh.tiles_across();
      // The tile's steps from its reported scale (as fp_qdq_elements rebuilds them).
      float div = 1, mul = 0, step = 1;
      if (c.family == FpFamily::Nvfp4) {
        const float d = scale[size_t(t)] * (sh.global_scale == 0.0f ? 0.0f : 1.0f / sh.global_scale);
        mul = d == 0.0f ? 0.0f : 1.0f / d;
        step = mul == 0.0f ? 0.0f : 1.0f / mul;
      } else {
        div = step = c.family == FpFamily::Fp8 ? scale[size_t(t)] : pow2f(int(scale[size_t(t)]));
      }
      double gq = 0, gw = 0;
      for (int64_t r = tr * sh.tile_rows; r < std::min(out, (tr + 1) * sh.tile_rows); ++r)
        for (int64_t k = tc * sh.tile_cols; k < std::min(in, (tc + 1) * sh.tile_cols); ++k) {
          const float w = W[size_t(r * in + k)], gr = g[size_t(r * in + k)];
          const float u = (c.family == FpFamily::Nvfp4 ? w * mul : w / div) + V[size_t(r * vw + k)];
          const float cl = std::clamp(u, -mn, mn);
          const float q = c.elem == FpElem::E2M1 ? e2m1_round(cl) : e4m3_round(cl);
          float rg = 1.0f;
          if (c.family != FpFamily::Fp8 && (u == 0.0f || std::fabs(q) == mn)) {
            rg = 0.0f;
          } else if ((c.family == FpFamily::Mx || c.family == FpFamily::MxRceil) &&
                     std::fabs(u) >= std::ldexp(1.0f, sh.emin() + 1)) {
            rg = q / u;
          }
          const float du = u > -mn && u < mn ? gr * step * rg : 0.0f, wq = q * step;
          if (std::memcmp(&What[size_t(r * in + k)], &wq, 4) != 0 && ++bad <= 5)
            ADD_FAILURE() << "What[" << r << ", " << k << "] " << What[size_t(r * in + k)] << " vs " << wq;
          if (std::memcmp(&dV[size_t(r * vw + k)], &du, 4) != 0 && ++bad <= 5)
            ADD_FAILURE() << "dV[" << r << ", " << k << "] " << dV[size_t(r * vw + k)] << " vs " << du;
          gq += double(gr) * q;
          gw += double(du) * w;
        }
      // beta_grad's formulas (init 1): dbeta = dM amax, 0 where the scale passes no gradient.
      double dM = 0;
      if (c.family == FpFamily::Nvfp4) {
        const double os = mul, d = double(1.0f / mul), G = sh.global_scale;
        dM = -(gw - gq / (os * os)) / (d * d) / G * G * double(float(1.0 / 6.0));
      } else {
        const double ds = gq - gw / (double(div) * double(div));
        const float M = amax[size_t(t)] * beta[size_t(t)];
        dM = c.family == FpFamily::Fp8 ? ds / 448.0 : ds * double(div) / double(M);
      }
      const float want = float(dM * double(amax[size_t(t)]));
      if (dbeta[size_t(t)] != 0.0f) {
        EXPECT_EQ(dbeta[size_t(t)], want) << "tile " << t;
        ++passing;
      }
    }
    EXPECT_GT(passing, nt / 2);
    EXPECT_EQ(bad, 0);
  }
}

TEST(QdqFp, AnAllZeroTileStaysZeroWithFiniteGradients) {
  for (FpFamily fam : {FpFamily::Mx, FpFamily::MxRceil, FpFamily::Nvfp4, FpFamily::Fp8}) {
    const FpElem elem = fam == FpFamily::Fp8 ? FpElem::E4M3 : FpElem::E2M1;
    FpQdqShape sh = make_fp_qdq_shape(fam, elem, 2, 32, fam == FpFamily::Nvfp4 ? 16 : 32);
    std::vector<float> W(64, 0.f), dW(64, 1.f), amax(size_t(sh.tiles())), What(64, 9.f), dV(64), db(amax.size());
    for (int i = 32; i < 64; ++i) W[size_t(i)] = 0.01f * float(i - 40);  // row 1 is not zero
    sh.global_scale = nvfp4_global_scale(W.data(), 64);
    fp_qdq_amax(sh, W.data(), amax.data());
    fp_qdq_fwd(sh, W.data(), nullptr, nullptr, nullptr, amax.data(), What.data(), nullptr);
    fp_qdq_bwd(sh, W.data(), nullptr, nullptr, nullptr, amax.data(), dW.data(), dV.data(), db.data());
    for (int i = 0; i < 32; ++i) EXPECT_EQ(What[size_t(i)], 0.f) << int(fam);
    for (float g : db) EXPECT_TRUE(std::isfinite(g)) << int(fam);
    for (float g : dV) EXPECT_TRUE(std::isfinite(g)) << int(fam);
    EXPECT_EQ(db[0], 0.f) << int(fam);
  }
}

// A tile so small that its shared exponent clamps at -127: 2^-127 is a float subnormal, which ldexp
// gives as 0 under the engine's flush-to-zero mode (core/float_mode.h), and w / 0 was inf; and
// rceil's M / 6 is subnormal too (it gave exponent 0). Built from bits (pow2f) and computed scaled,
// the exponent is AutoRound's and +-2^-125 = 4 * 2^-127 comes back as itself.
TEST(QdqFp, ATileAtTheSmallestSharedExponentRoundTrips) {
  for (FpFamily fam : {FpFamily::Mx, FpFamily::MxRceil}) {
    FpQdqShape sh = make_fp_qdq_shape(fam, FpElem::E2M1, 1, 32, 32);
    std::vector<float> W(32), dW(32, 1.f), amax(size_t(sh.tiles())), What(32), dV(32), db(amax.size());
    for (int i = 0; i < 32; ++i) W[size_t(i)] = (i % 2 ? 1.f : -1.f) * std::ldexp(1.f, -125);
    fp_qdq_amax(sh, W.data(), amax.data());
    std::vector<float> scale(amax.size());
    fp_qdq_fwd(sh, W.data(), nullptr, nullptr, nullptr, amax.data(), What.data(), scale.data());
    fp_qdq_bwd(sh, W.data(), nullptr, nullptr, nullptr, amax.data(), dW.data(), dV.data(), db.data());
    EXPECT_EQ(scale[0], -127.f) << int(fam);  // rceil: M / 6 is subnormal, computed scaled (qdq_fp.cpp)
    for (int i = 0; i < 32; ++i) EXPECT_EQ(What[size_t(i)], W[size_t(i)]) << int(fam) << " element " << i;
    for (float g : dV) EXPECT_TRUE(std::isfinite(g)) << int(fam);
  }
}

TEST(QdqFp, TilesFollowAutoRoundsGrouping) {
  FpQdqShape g = make_fp_qdq_shape(FpFamily::Mx, FpElem::E2M1, 4, 80, 32);
  EXPECT_EQ(g.tiles(), 12);
  EXPECT_EQ(g.padded_in(), 96);
  FpQdqShape narrow = make_fp_qdq_shape(FpFamily::Mx, FpElem::E2M1, 4, 20, 32);  // in < g: one group of 20
  EXPECT_EQ(narrow.tile_cols, 20);
  EXPECT_EQ(narrow.tiles(), 4);
  FpQdqShape ch = make_fp_qdq_shape(FpFamily::Fp8, FpElem::E4M3, 5, 7, -1);
  EXPECT_EQ(ch.tiles(), 5);
  FpQdqShape t = make_fp_qdq_shape(FpFamily::Fp8, FpElem::E4M3, 5, 7, 0);
  EXPECT_EQ(t.tiles(), 1);
  FpQdqShape b = make_fp_qdq_shape(FpFamily::Fp8, FpElem::E4M3, 300, 129, 128, 128);
  EXPECT_EQ(b.tiles_down(), 3);
  EXPECT_EQ(b.tiles_across(), 2);
  EXPECT_EQ(b.padded_in(), 256);
}

TEST(QdqFp, RefusesWhatAutoRoundHasNot) {
  EXPECT_THROW(make_fp_qdq_shape(FpFamily::Nvfp4, FpElem::E4M3, 4, 32, 16), Error);
  EXPECT_THROW(make_fp_qdq_shape(FpFamily::Fp8, FpElem::E2M1, 4, 32, -1), Error);
  EXPECT_THROW(make_fp_qdq_shape(FpFamily::Mx, FpElem::E2M1, 0, 32, 32), Error);
  EXPECT_THROW(make_fp_qdq_shape(FpFamily::Fp8, FpElem::E4M3, 4, 32, -2), Error);
  EXPECT_THROW(make_fp_qdq_shape(FpFamily::Fp8, FpElem::E4M3, 4, 32, 0, 128), Error);
}
