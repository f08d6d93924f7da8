// The reference kernels' units that the CUDA kernels run one thread each (kernels/ref/*: AR_HD), run here
// on the CPU in double over every unit, against the whole-tensor references they were cut from.
#include <random>
#include <vector>

#include "kernels/ref/attention_ref.h"
#include "kernels/ref/attention_units.h"
#include "test_util.h"

using namespace ar;

namespace {

std::vector<double> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

namespace {
// GQA (4 query heads on 2 kv heads), more keys than queries (a KV-cache step), a padded key, and a
// query that sees no key at all (its row gets o = 0, lse = -inf and no gradient); `window`: a sliding
// window (0: none).
void expect_units_equal_reference(int64_t window) {
  ref::AttnShape s{2, 5, 7, 4, 2, 8};
  s.window = window;
  const int64_t nq = s.B * s.Tq * s.H * s.D, nk = s.B * s.Tk * s.Hkv * s.D, rows = s.B * s.H * s.Tq;
  const auto q = randn(size_t(nq), 1), k = randn(size_t(nk), 2), v = randn(size_t(nk), 3), dout = randn(size_t(nq), 4);
  std::vector<uint8_t> mask(size_t(s.B * s.Tk), 1);
  mask[3] = 0;                    // batch 0: key 3 padded
  for (int j = 0; j <= 2; ++j) mask[size_t(s.Tk + j)] = 0;  // batch 1: query 0 (position 2) sees nothing
  std::vector<double> o(static_cast<size_t>(nq)), lse(static_cast<size_t>(rows)), o2(static_cast<size_t>(nq)), lse2(static_cast<size_t>(rows));
  ref::attention_fwd(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data());
  std::vector<double> dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nk)), dv(static_cast<size_t>(nk));
  ref::attention_bwd(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), dout.data(), dq.data(),
                     dk.data(), dv.data());

  std::vector<double> delta(static_cast<size_t>(rows)), dq2(static_cast<size_t>(nq), 7.0), dk2(static_cast<size_t>(nk), 7.0), dv2(static_cast<size_t>(nk), 7.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Tq; ++i) {
        ref::attn_fwd_query(s, q.data(), k.data(), v.data(), mask.data(), o2.data(), lse2.data(), b, h, i);
        ref::attn_delta_query(s, o2.data(), dout.data(), delta.data(), b, h, i);
      }
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Tq; ++i)
        ref::attn_dq_query(s, q.data(), k.data(), v.data(), mask.data(), lse2.data(), delta.data(), dout.data(),
                           dq2.data(), b, h, i);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t hk = 0; hk < s.Hkv; ++hk)
      for (int64_t j = 0; j < s.Tk; ++j)
        ref::attn_dkv_key(s, q.data(), k.data(), v.data(), mask.data(), lse2.data(), delta.data(), dout.data(),
                          dk2.data(), dv2.data(), b, hk, j);

  int empty = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (std::isinf(lse[size_t(r)])) {
      ++empty;
      EXPECT_EQ(lse2[size_t(r)], lse[size_t(r)]);
    } else {
      EXPECT_NEAR(lse2[size_t(r)], lse[size_t(r)], 1e-12) << r;
    }
  }
  EXPECT_EQ(empty, int(s.H));  // the one blind query, in each of its heads
  EXPECT_LT(test::rel_err(o2.data(), o.data(), o.size()), 1e-13);
  EXPECT_LT(test::rel_err(dq2.data(), dq.data(), dq.size()), 1e-13);
  EXPECT_LT(test::rel_err(dk2.data(), dk.data(), dk.size()), 1e-13);
  EXPECT_LT(test::rel_err(dv2.data(), dv.data(), dv.size()), 1e-13);
  double padded = 0;  // the padded key gets no gradient
  for (int64_t hk = 0; hk < s.Hkv; ++hk)
    for (int64_t d = 0; d < s.D; ++d) padded += std::abs(dk2[size_t((3 * s.Hkv + hk) * s.D + d)]);
  EXPECT_EQ(padded, 0.0);
}
}  // namespace

TEST(AttentionUnits, EqualTheReferenceForwardAndBackward) {
  expect_units_equal_reference(0);
  expect_units_equal_reference(3);  // a sliding window of 3 keys (the CUDA per-unit kernels run it)
}
