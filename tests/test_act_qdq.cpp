// FP8_STATIC's activation QDQ (kernels/ref/act_qdq_ref.h, kernels/cpu/act_qdq.cpp) against AutoRound's
// own: tests/data/fp_goldens/act_qdq.safetensors, made by tools/make_act_qdq_goldens.py with the
// auto-round 0.16.1 wheel (quant_fp8_sym as WrapperLinear._qdq_act calls it, gradients by autograd).
// The scale and the QDQ values are bit-identical, the input gradient too (torch's clamp passes none at
// its bounds, and its division gives (dq s) / s, which is not always dq); the coefficient's
// gradient is a sum torch takes in its own fp32 order, within 1e-5 relative. Then the op's own
// contracts: the CPU path equals the reference, its dL/ds does not depend on the thread count, and the
// backward adds to dx or leaves it alone as asked.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/small_float.h"
#include "io/safetensors.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/act_qdq_ref.h"
#include "quant/qdq_fp.h"
#include "golden_file.h"
#include "test_util.h"

using namespace ar;

namespace {

using test::read_f32;

struct Case {
  const char* name;
  int64_t rows, cols;
};
constexpr Case kCases[] = {{"inside", 6, 40}, {"clipped", 8, 48}, {"loose", 5, 24}, {"floor", 4, 16}};

}  // namespace

TEST(ActQdq, MatchesAutoRoundForwardAndGradients) {
  auto f = SafetensorsFile::open(std::string(AR_SOURCE_DIR) + "/tests/data/fp_goldens/act_qdq.safetensors");
  Context ctx(Device{}, 2);
  int clipped = 0;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::string p = std::string(c.name) + "/";
    const size_t n = size_t(c.rows * c.cols);
    const auto x = read_f32(*f, p + "x", n), dy = read_f32(*f, p + "dy", n);
    const float amax = read_f32(*f, p + "act_max", 1)[0], coef = read_f32(*f, p + "coef", 1)[0];
    const float s = quant::fp8_static_input_scale(amax * coef);
    EXPECT_EQ(s, read_f32(*f, p + "scale", 1)[0]);
    std::vector<float> y(n), dx(n, 5.f);
    cpu::act_qdq_fwd(ctx, x.data(), s, y.data(), int64_t(n));
    const auto want_y = read_f32(*f, p + "y", n), want_dx = read_f32(*f, p + "dx", n);
    int diff = 0;
    for (size_t i = 0; i < n; ++i) diff += std::memcmp(&y[i], &want_y[i], 4) != 0;
    EXPECT_EQ(diff, 0) << "QDQ values differ";
    const double ds = cpu::act_qdq_bwd(ctx, x.data(), s, dy.data(), dx.data(), false, c.rows, c.cols);
    diff = 0;
    for (size_t i = 0; i < n; ++i) {
      diff += dx[i] != want_dx[i];
      clipped += std::fabs(x[i] / s) >= kE4M3Max;
    }
    EXPECT_EQ(diff, 0) << "input gradients differ";
    // d coef = dL/ds * act_max / 448 where the scale is above vLLM's floor, else 0 (the clip's mask).
    const bool passes = amax * coef / kE4M3Max > quant::fp8_static_input_scale(0.f);
    const double dcoef = passes ? ds * amax / kE4M3Max : 0.0;
    const double want = read_f32(*f, p + "dcoef", 1)[0];
    EXPECT_NEAR(dcoef, want, 1e-5 * std::fabs(want) + 1e-7) << "coefficient gradient";
  }
  EXPECT_GT(clipped, 0) << "no golden element is clipped";
}

TEST(ActQdq, CpuMatchesReferenceAndAddsAsAsked) {
  const int64_t rows = 37, cols = 96, n = rows * cols;
  auto xd = test::randn<double>(size_t(n), 3, 2.0), gd = test::randn<double>(size_t(n), 4, 1.0);
  std::vector<float> x(xd.begin(), xd.end()), dq(gd.begin(), gd.end());
  const float s = 5.0f / 448.0f;  // clips the tails
  std::vector<float> yc(static_cast<size_t>(n)), yr(static_cast<size_t>(n));
  Context c1(Device{}, 1), c2(Device{}, 2);
  cpu::act_qdq_fwd(c2, x.data(), s, yc.data(), n);
  ref::act_qdq_fwd(x.data(), s, yr.data(), n);
  EXPECT_TRUE(yc == yr);
  std::vector<float> dx1(size_t(n), 1.f), dx2(size_t(n), 1.f), dxr(size_t(n), 1.f);
  const double ds1 = cpu::act_qdq_bwd(c1, x.data(), s, dq.data(), dx1.data(), true, rows, cols);
  const double ds2 = cpu::act_qdq_bwd(c2, x.data(), s, dq.data(), dx2.data(), true, rows, cols);
  const float dsr = ref::act_qdq_bwd(x.data(), s, dq.data(), dxr.data(), true, n);
  EXPECT_EQ(ds1, ds2) << "dL/ds depends on the thread count";
  EXPECT_NEAR(ds1, dsr, 1e-5 * std::fabs(ds1));
  EXPECT_TRUE(dx1 == dxr && dx2 == dxr);
  for (int64_t i = 0; i < n; ++i) {
    const bool pass = std::fabs(x[size_t(i)] / s) < kE4M3Max;
    ASSERT_EQ(dx1[size_t(i)], pass ? 1.f + dq[size_t(i)] * s / s : 1.f) << i;
  }
  // dx null: dL/ds only, the same value.
  EXPECT_EQ(cpu::act_qdq_bwd(c2, x.data(), s, dq.data(), nullptr, false, rows, cols), ds1);
}
