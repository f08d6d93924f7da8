// cpu::exp_inplace (kernels/cpu/exp.cpp) against exp in double: within 2 ulp over the whole fp32 range,
// zero where exp is below FLT_MIN (no subnormal results: core/float_mode.h), special values exact, and the same bits whether an element is computed in an AVX-512 block or alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"

using namespace ar;

namespace {
// Distance in units in the last place between a float and the exact value (double).
double ulps(float got, double want) {
  const float w = float(want);
  if (w == 0.f || std::isinf(w)) return got == w ? 0.0 : 1e9;
  const double ulp = std::ldexp(1.0, std::ilogb(w) - 23);  // in double: a float ulp near FLT_MIN is subnormal
  return std::abs(double(got) - want) / ulp;
}
}  // namespace

TEST(Exp, WithinTwoUlpOverTheWholeRange) {
  std::vector<float> x;
  for (float v = -110.f; v <= 90.f; v += 0.0137f) x.push_back(v);
  for (float v = -1e-3f; v <= 1e-3f; v += 1.7e-6f) x.push_back(v);
  std::vector<float> y = x;
  cpu::exp_inplace(y.data(), int64_t(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]));
    if (want < double(std::numeric_limits<float>::min())) {  // below FLT_MIN: flushed to zero
      EXPECT_EQ(y[i], 0.f) << x[i];
      continue;
    }
    worst = std::max(worst, ulps(y[i], want));
    ASSERT_LE(ulps(y[i], want), 2.0) << "exp(" << x[i] << ") = " << y[i] << ", exact " << want;
  }
  RecordProperty("worst_ulps", std::to_string(worst));
}

TEST(Exp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.f, -0.f, -inf, inf, std::nanf(""), 89.f, 88.8f, -104.f, -1000.f, 1000.f};
  std::vector<float> y = x;
  cpu::exp_inplace(y.data(), int64_t(y.size()));
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], 1.f);
  EXPECT_EQ(y[2], 0.f);
  EXPECT_EQ(y[3], inf);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], inf);  // exp(89) > FLT_MAX
  EXPECT_EQ(y[6], inf);
  EXPECT_EQ(y[7], 0.f);
  EXPECT_EQ(y[8], 0.f);
  EXPECT_EQ(y[9], inf);
}

TEST(Exp, SameBitsInBlocksAndAlone) {
  std::vector<float> x;
  for (int i = 0; i < 4099; ++i) x.push_back(float(i % 997) * 0.173f - 90.f);
  std::vector<float> all = x;
  cpu::exp_inplace(all.data(), int64_t(all.size()));  // blocks of 16 plus a tail
  for (size_t i = 0; i < x.size(); ++i) {
    float one = x[i];
    cpu::exp_inplace(&one, 1);  // the scalar path
    uint32_t a, b;
    std::memcpy(&a, &all[i], 4);
    std::memcpy(&b, &one, 4);
    ASSERT_EQ(a, b) << "element " << i << " x " << x[i];
  }
}
