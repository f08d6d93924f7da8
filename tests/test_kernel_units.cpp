// The reference kernels' units that the CUDA kernels run one thread each (kernels/ref/*: AR_HD), run here
// on the CPU in double over every unit, against the whole-tensor references they were cut from.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/attention_ref.h"
#include "kernels/ref/attention_units.h"
#include "kernels/ref/rmsnorm_ref.h"
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

namespace {

// A warp's xor butterfly as the CUDA kernels run it (__shfl_xor_sync over 32 lanes): every lane must end
// with the same bits.
float butterfly(std::vector<float> v) {
  for (size_t off = v.size() / 2; off > 0; off /= 2) {
    std::vector<float> next(v.size());
    for (size_t l = 0; l < v.size(); ++l) next[l] = v[l] + v[l ^ off];
    v = next;
  }
  for (float x : v) EXPECT_EQ(std::memcmp(&x, &v[0], sizeof x), 0) << "the lanes disagree";
  return v[0];
}

}  // namespace

// rmsnorm.cu's row-parallel kernels: 32 lanes per row (dims below, at and above the lane count), dw in
// chunks of rows (a partial last one), in fp32 against the formulas in double.
TEST(RmsnormUnits, LanesAndRowChunksEqualTheReference) {
  constexpr int kLanes = 32;
  constexpr int64_t kChunk = 4;
  for (const int64_t dim : {int64_t(1), int64_t(33), int64_t(128), int64_t(4096)}) {
    const int64_t rows = 10, n = rows * dim;
    const auto xd = randn(size_t(n), 11), dyd = randn(size_t(n), 12), wd0 = randn(size_t(dim), 13),
               dxd0 = randn(size_t(n), 14), dwd0 = randn(size_t(dim), 15);
    std::vector<double> wd(wd0), yd(static_cast<size_t>(n)), rstdd(static_cast<size_t>(rows)), dxd(dxd0), dwd(dwd0);
    for (auto& v : wd) v = 1 + 0.1 * v;
    const std::vector<float> x(xd.begin(), xd.end()), dy(dyd.begin(), dyd.end()), w(wd.begin(), wd.end());
    std::vector<float> y(static_cast<size_t>(n)), rstd(static_cast<size_t>(rows)), dx(dxd0.begin(), dxd0.end()),
        dw(dwd0.begin(), dwd0.end());
    const std::vector<double> xr(x.begin(), x.end()), dyr(dy.begin(), dy.end()), wr(w.begin(), w.end());
    for (int64_t r = 0; r < rows; ++r) {  // the formulas, written out (the reference shares the units' code)
      double ss = 0, dot = 0;
      for (int64_t c = 0; c < dim; ++c) ss += xr[size_t(r * dim + c)] * xr[size_t(r * dim + c)];
      const double rs = 1 / std::sqrt(ss / double(dim) + 1e-6);
      rstdd[size_t(r)] = rs;
      for (int64_t c = 0; c < dim; ++c) {
        const size_t i = size_t(r * dim + c);
        yd[i] = wr[size_t(c)] * xr[i] * rs;
        dot += dyr[i] * wr[size_t(c)] * xr[i] * rs;
        dwd[size_t(c)] += dyr[i] * xr[i] * rs;
      }
      for (int64_t c = 0; c < dim; ++c) {
        const size_t i = size_t(r * dim + c);
        dxd[i] += rs * (dyr[i] * wr[size_t(c)] - xr[i] * rs * dot / double(dim));
      }
    }
    std::vector<float> part(kLanes);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xrow = x.data() + r * dim;
      for (int l = 0; l < kLanes; ++l) part[size_t(l)] = ref::rmsnorm_sumsq_lane(xrow, dim, l, kLanes);
      rstd[size_t(r)] = ref::rmsnorm_rstd(butterfly(part), dim, 1e-6);
      for (int l = 0; l < kLanes; ++l)
        ref::rmsnorm_fwd_lane(xrow, w.data(), y.data() + r * dim, rstd[size_t(r)], dim, l, kLanes);
      for (int l = 0; l < kLanes; ++l)
        part[size_t(l)] = ref::rmsnorm_bwd_dot_lane(dy.data() + r * dim, w.data(), xrow, rstd[size_t(r)], dim, l, kLanes);
      const float dot = butterfly(part) / float(dim);
      for (int l = 0; l < kLanes; ++l)
        ref::rmsnorm_bwd_lane(dy.data() + r * dim, w.data(), xrow, rstd[size_t(r)], dot, dx.data() + r * dim, true,
                              dim, l, kLanes);
    }
    for (int64_t c = 0; c < dim; ++c)
      for (int64_t r0 = 0; r0 < rows; r0 += kChunk)
        dw[size_t(c)] += ref::rmsnorm_dw_chunk(dy.data(), x.data(), rstd.data(), c, r0, std::min(rows, r0 + kChunk), dim);
    const std::string at = "dim " + std::to_string(dim);
    EXPECT_LT(test::rel_err(y.data(), yd.data(), yd.size()), 1e-6) << at;
    EXPECT_LT(test::rel_err(rstd.data(), rstdd.data(), rstdd.size()), 1e-6) << at;
    EXPECT_LT(test::rel_err(dx.data(), dxd.data(), dxd.size()), 1e-6) << at;
    EXPECT_LT(test::rel_err(dw.data(), dwd.data(), dwd.size()), 1e-6) << at;
  }
}
