// The 4- and 8-bit float codes (core/small_float.h), over every code: decoding against the formats'
// definitions written out here in double; encoding against a brute-force nearest-code search with
// ties to the even code, over every bf16 bit pattern (all exponents, both signs) and every midpoint
// between neighbouring codes (and one ulp either side); saturation, signed zero and NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/small_float.h"
#include "test_util.h"

using namespace ar;


namespace {

// The value of a code, from the format's definition (bias 1 / 7, 1 / 3 mantissa bits).
double e2m1_def(int c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const double mag = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::ldexp(1.0, e - 1);
  return (c & 8) ? -mag : mag;
}
double e4m3_def(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (c & 0x80) ? -mag : mag;
}

// Nearest finite code to x (|x| saturating at the largest), ties to the code with an even mantissa.
int nearest(double x, double (*def)(int), int sign_bit) {
  const double a = std::fabs(x);
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < sign_bit; ++c) {
    const double v = def(c);
    if (std::isnan(v)) continue;
    const double d = std::fabs(v - a);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return (std::signbit(x) ? sign_bit : 0) | best;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Every float worth trying for a format: all bf16 patterns below `limit` in magnitude (every binade
// at 8-bit precision), plus each midpoint of neighbouring codes and its two float neighbours.
std::vector<float> probes(double (*def)(int), int sign_bit, float limit) {
  std::vector<float> xs;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isfinite(f) && std::fabs(f) < limit) xs.push_back(f);
  }
  std::vector<double> vals;
  for (int c = 0; c < sign_bit; ++c)
    if (!std::isnan(def(c))) vals.push_back(def(c));
  std::sort(vals.begin(), vals.end());
  for (size_t i = 0; i + 1 < vals.size(); ++i) {
    const float mid = float((vals[i] + vals[i + 1]) / 2);  // exact: both have few mantissa bits
    for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(f);
      xs.push_back(-f);
    }
  }
  return xs;
}

}  // namespace

TEST(FpCodes, E2M1DecodesEveryCode) {
  const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_decode(uint8_t(c)), expect[c]) << c;
    EXPECT_EQ(double(e2m1_decode(uint8_t(c))), e2m1_def(c)) << c;
    EXPECT_EQ(std::signbit(e2m1_decode(uint8_t(c))), c >= 8) << c;  // -0 keeps its sign
    EXPECT_EQ(e2m1_encode(e2m1_decode(uint8_t(c))), c) << c;
    EXPECT_EQ(e2m1_decode(uint8_t(c | 0xF0)), expect[c]) << "high nibble ignored";
  }
}

TEST(FpCodes, E4M3DecodesEveryCode) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double d = e4m3_def(c);
    const float f = e4m3_decode(uint8_t(c));
    if (std::isnan(d)) {
      ++nans;
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(double(f), d) << c;
    EXPECT_EQ(std::signbit(f), c >= 0x80) << c;
    EXPECT_EQ(e4m3_encode(f), c) << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF
  EXPECT_EQ(e4m3_decode(0x7E), 448.f);
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.f, -6));  // smallest normal
}

// Every probe of a format encodes to the brute-force nearest code; returns how many were tried.
static int64_t check_nearest(uint8_t (*encode)(float), double (*def)(int), int sign_bit, float limit) {
  int64_t n = 0;
  for (float x : probes(def, sign_bit, limit)) {
    if (encode(x) != nearest(x, def, sign_bit)) {
      ADD_FAILURE() << "x = " << x << ": code " << int(encode(x)) << ", nearest " << nearest(x, def, sign_bit);
      return n;
    }
    ++n;
  }
  return n;
}

TEST(FpCodes, E2M1EncodesToTheNearestEvenCode) {
  EXPECT_GT(check_nearest(e2m1_encode, e2m1_def, 8, 8.f), 30000);
  // The ties by hand: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  const float ties[][2] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2}, {2.5f, 2}, {3.5f, 4}, {5.f, 4}};
  for (auto [x, r] : ties) {
    EXPECT_EQ(e2m1_round(x), r) << x;
    EXPECT_EQ(e2m1_round(-x), -r) << x;
  }
}

TEST(FpCodes, E4M3EncodesToTheNearestEvenCode) {
  EXPECT_GT(check_nearest(e4m3_encode, e4m3_def, 0x80, 512.f), 35000);
  EXPECT_EQ(e4m3_round(std::ldexp(1.f, -10)), 0.f);                     // half the smallest subnormal: to 0 (even)
  EXPECT_EQ(e4m3_round(std::ldexp(3.f, -11)), std::ldexp(1.f, -9));      // 3/4 of a subnormal step -> one step
  EXPECT_EQ(e4m3_round(std::ldexp(1.f, -6) - std::ldexp(1.f, -10)), std::ldexp(1.f, -6));  // subnormal -> normal carry
  EXPECT_EQ(e4m3_round(15.5f), 16.f);  // mantissa carry into the next binade
}

// The inline rounding the QDQ uses equals decode(encode(x)) bit for bit (sign of zero included): on
// every grid value, every midpoint between neighbours and one ulp either side of both, and a sweep
// over every 97th fp32 bit pattern of either sign (all binades, subnormals, Inf and NaN included).
TEST(FpCodes, FastRoundingEqualsDecodeOfEncode) {
  auto same = [](float a, float b) {
    uint32_t x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    return x == y || (a != a && b != b);
  };
  auto check = [&](float v) {
    ASSERT_TRUE(same(e2m1_round(v), e2m1_decode(e2m1_encode(v)))) << "e2m1 " << v;
    ASSERT_TRUE(same(e4m3_round(v), e4m3_decode(e4m3_encode(v)))) << "e4m3 " << v;
  };
  std::vector<float> grid;
  for (int c = 0; c < 16; ++c) grid.push_back(e2m1_decode(uint8_t(c)));
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) grid.push_back(e4m3_decode(uint8_t(c)));
  std::sort(grid.begin(), grid.end());
  for (size_t i = 0; i < grid.size(); ++i) {
    std::vector<float> pts = {grid[i]};
    if (i + 1 < grid.size()) pts.push_back(grid[i] + (grid[i + 1] - grid[i]) / 2);  // exact midpoint
    for (float p : pts)
      for (float v : {p, std::nextafter(p, -INFINITY), std::nextafter(p, INFINITY)}) check(v);
  }
  int64_t n = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 97, ++n) {
    float v;
    const auto b = uint32_t(u);
    std::memcpy(&v, &b, 4);
    check(v);
  }
  EXPECT_GT(n, 44000000);
}

TEST(FpCodes, SaturationSignedZeroAndNan) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float big : {6.f, 7.f, 1e30f, inf}) {
    EXPECT_EQ(e2m1_encode(big), 0x7) << big;
    EXPECT_EQ(e2m1_encode(-big), 0xF) << big;
  }
  for (float big : {448.f, 464.f, 480.f, 1e30f, inf}) {
    EXPECT_EQ(e4m3_encode(big), 0x7E) << big;
    EXPECT_EQ(e4m3_encode(-big), 0xFE) << big;
  }
  EXPECT_EQ(e2m1_encode(-0.f), 0x8);
  EXPECT_EQ(e4m3_encode(-0.f), 0x80);
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8);  // rounds to zero, keeps the sign
  EXPECT_TRUE(std::signbit(e4m3_round(-1e-9f)));
  EXPECT_EQ(e4m3_encode(nan), 0x7F);
  EXPECT_EQ(e4m3_encode(-nan), 0xFF);
  EXPECT_EQ(e2m1_encode(nan), 0x0);
  EXPECT_EQ(e2m1_encode(from_bits(0x00000001u)), 0x0);  // float subnormals
  EXPECT_EQ(e4m3_encode(from_bits(0x80000001u)), 0x80);
}

TEST(FpCodes, Pow2IsExactDownToTheSmallestSubnormal) {
  for (int e = -149; e <= 127; ++e) EXPECT_EQ(double(pow2f(e)), std::ldexp(1.0, e)) << e;  // double: all normal
}

TEST(FpCodes, E8M0CodesEveryExponent) {
  for (int e = -127; e <= 127; ++e) {
    const uint8_t c = e8m0_encode(e);
    EXPECT_EQ(int(c), e + 127);
    // Against bits, not ldexp: 2^-127 is a float subnormal, which ldexp's arithmetic gives as 0 under
    // the tests' flush-to-zero mode (core/float_mode.h).
    EXPECT_EQ(to_bits(e8m0_decode(c)), e == -127 ? 0x00400000u : uint32_t(e + 127) << 23) << e;
  }
  EXPECT_TRUE(std::isnan(e8m0_decode(0xFF)));
}
