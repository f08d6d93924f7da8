// Every CPU kernel (fp32) vs its double reference, forward and backward. Tolerance: relative L2
// error below ~1e-5 (fp32 epsilon 6e-8 times accumulation lengths and condition numbers here).
#include "core/context.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/embedding_ref.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/rmsnorm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "kernels/ref/gate_act_ref.h"
#include "kernels/ref/xent_ref.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {
constexpr double kTol = 2e-5;
template <class F, class D>
void expect_close(const char* what, const std::vector<F>& got, const std::vector<D>& want, double tol = kTol) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(rel_err(got.data(), want.data(), got.size()), tol) << what;
}
}  // namespace

TEST(CpuKernels, LinearWithBias) {
  Context ctx;
  const int64_t n = 37, in = 65, out = 33;
  auto xd = randn<double>(n * in, 1), Wd = randn<double>(out * in, 2), bd = randn<double>(out, 3),
       dyd = randn<double>(n * out, 4);
  auto x = cast<float>(xd), W = cast<float>(Wd), b = cast<float>(bd), dy = cast<float>(dyd);
  xd = cast<double>(x); Wd = cast<double>(W); bd = cast<double>(b); dyd = cast<double>(dy);
  std::vector<double> yd(n * out), dxd(n * in, 1.0), dWd(out * in, 0.5), dbd(out, 0.25);
  std::vector<float> y(n * out), dx(n * in, 1.f), dW(out * in, 0.5f), db(out, 0.25f);
  ref::linear_fwd(xd.data(), Wd.data(), bd.data(), yd.data(), n, in, out);
  cpu::linear_fwd(ctx, x.data(), W.data(), b.data(), y.data(), n, in, out);
  expect_close("y", y, yd);
  ref::linear_bwd(dyd.data(), xd.data(), Wd.data(), dxd.data(), true, dWd.data(), dbd.data(), n, in, out);
  cpu::linear_bwd(ctx, dy.data(), x.data(), W.data(), dx.data(), true, dW.data(), db.data(), n, in, out);
  expect_close("dx (accumulated)", dx, dxd);
  expect_close("dW", dW, dWd);
  expect_close("db", db, dbd);
}

TEST(CpuKernels, RmsNorm) {
  Context ctx;
  const int64_t rows = 29, dim = 96;
  auto x = cast<float>(randn<double>(rows * dim, 5, 3.0)), w = cast<float>(randn<double>(dim, 6)),
       dy = cast<float>(randn<double>(rows * dim, 7));
  auto xd = cast<double>(x), wd = cast<double>(w), dyd = cast<double>(dy);
  std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0.f);
  std::vector<double> yd(rows * dim), rstdd(rows), dxd(rows * dim), dwd(dim, 0.0);
  cpu::rmsnorm_fwd(ctx, x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6);
  ref::rmsnorm_fwd(xd.data(), wd.data(), yd.data(), rstdd.data(), rows, dim, 1e-6);
  expect_close("y", y, yd);
  cpu::rmsnorm_bwd(ctx, dy.data(), x.data(), w.data(), rstd.data(), dx.data(), false, dw.data(), rows, dim);
  ref::rmsnorm_bwd(dyd.data(), xd.data(), wd.data(), rstdd.data(), dxd.data(), false, dwd.data(), rows, dim);
  expect_close("dx", dx, dxd);
  expect_close("dw", dw, dwd);
}

TEST(CpuKernels, Rope) {
  Context ctx;
  const int64_t rows = 13, heads = 3, D = 16, maxpos = 32;
  for (const RopeDims rd : {RopeDims::full(D), RopeDims{D, 0, 8, false}, RopeDims{D, 8, 8, true}}) {
    const int64_t half = rd.dims / 2;
    std::vector<double> cd(maxpos * half), sd(maxpos * half);
    for (int64_t p = 0; p < maxpos; ++p)
      for (int64_t i = 0; i < half; ++i) {
        double a = p * std::pow(500000.0, -2.0 * i / rd.dims);
        cd[p * half + i] = std::cos(a);
        sd[p * half + i] = std::sin(a);
      }
    auto cf = cast<float>(cd), sf = cast<float>(sd);
    cd = cast<double>(cf); sd = cast<double>(sf);
    std::vector<int32_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = int32_t((r * 7) % maxpos);
    auto x = cast<float>(randn<double>(rows * heads * D, 8));
    auto xd = cast<double>(x);
    cpu::rope_fwd(ctx, x.data(), pos.data(), cf.data(), sf.data(), rows, heads, rd);
    ref::rope_fwd(xd.data(), pos.data(), cd.data(), sd.data(), rows, heads, rd);
    expect_close("fwd", x, xd);
    cpu::rope_bwd(ctx, x.data(), pos.data(), cf.data(), sf.data(), rows, heads, rd);
    ref::rope_bwd(xd.data(), pos.data(), cd.data(), sd.data(), rows, heads, rd);
    expect_close("bwd", x, xd);
  }
}

class CpuAttention : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

TEST_P(CpuAttention, MatchesReference) {
  Context ctx;
  auto [Tq, Tk, masked] = GetParam();
  ref::AttnShape s{2, Tq, Tk, 6, 2, 16};
  auto q = cast<float>(randn<double>(s.B * s.Tq * s.H * s.D, 10)), k = cast<float>(randn<double>(s.B * s.Tk * s.Hkv * s.D, 11)),
       v = cast<float>(randn<double>(s.B * s.Tk * s.Hkv * s.D, 12)), dout = cast<float>(randn<double>(q.size(), 13));
  std::vector<uint8_t> mask(s.B * s.Tk, 1);
  if (masked) { mask[0] = 0; mask[s.Tk + 2] = 0; mask[2 * s.Tk - 1] = 0; }
  auto qd = cast<double>(q), kd = cast<double>(k), vd = cast<double>(v), dd = cast<double>(dout);
  std::vector<float> o(q.size()), lse(s.B * s.H * s.Tq), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<double> od(q.size()), lsed(lse.size()), dqd(q.size()), dkd(k.size()), dvd(v.size());
  cpu::attention_fwd(ctx, s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data());
  ref::attention_fwd(s, qd.data(), kd.data(), vd.data(), mask.data(), od.data(), lsed.data());
  expect_close("o", o, od);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lsed[i])) {
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << i;
    } else {
      EXPECT_NEAR(lse[i], lsed[i], 1e-5 * (1 + std::abs(lsed[i]))) << i;
    }
  }
  cpu::attention_bwd(ctx, s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), dout.data(), dq.data(),
                     dk.data(), dv.data());
  ref::attention_bwd(s, qd.data(), kd.data(), vd.data(), mask.data(), od.data(), lsed.data(), dd.data(), dqd.data(),
                     dkd.data(), dvd.data());
  expect_close("dq", dq, dqd);
  expect_close("dk", dk, dkd);
  expect_close("dv", dv, dvd);
}

// The pool's items (whole groups, or (group, query tile) pairs where groups are too few to share) do
// not change a bit: every thread count gives the one-thread result (the tuning's world invariance
// rests on it). 3 KV groups of 300 queries (3 tiles): split on 2 and 4 threads, whole on 1 and 3.
TEST(CpuAttentionThreads, EveryThreadCountGivesTheSameBits) {
  for (const int variant : {0, 1, 2}) {  // plain, padded keys, a sliding window of 100 with sinks
    const bool masked = variant == 1;
    ref::AttnShape s{1, 300, 300, 9, 3, 16};
    if (variant == 2) s.window = 100;
    const std::vector<float> sk = {0.5f, -2.f, 8.f, 0.f, 1.f, -0.5f, 2.f, 0.f, -1.f};
    const float* sinks = variant == 2 ? sk.data() : nullptr;
    auto q = cast<float>(randn<double>(s.B * s.Tq * s.H * s.D, 20)),
         k = cast<float>(randn<double>(s.B * s.Tk * s.Hkv * s.D, 21)),
         v = cast<float>(randn<double>(s.B * s.Tk * s.Hkv * s.D, 22)), dout = cast<float>(randn<double>(q.size(), 23));
    std::vector<uint8_t> mask(s.B * s.Tk, 1);
    if (masked) mask[5] = mask[140] = mask[299] = 0;
    std::vector<std::vector<float>> first;
    for (int threads : {1, 2, 3, 4}) {
      Context ctx(Device{}, threads);
      std::vector<float> o(q.size()), lse(s.B * s.H * s.Tq), dq(q.size()), dk(k.size()), dv(v.size());
      cpu::attention_fwd(ctx, s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), sinks);
      cpu::attention_bwd(ctx, s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), dout.data(),
                         dq.data(), dk.data(), dv.data());
      const std::vector<std::vector<float>> got{o, lse, dq, dk, dv};
      if (first.empty()) first = got;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(std::memcmp(got[i].data(), first[i].data(), got[i].size() * 4), 0)
            << "output " << i << " (o, lse, dq, dk, dv) on " << threads << " threads, variant " << variant;
    }
  }
}

// Sliding windows and sinks against the double reference: windows inside one query tile and across
// tiles and key blocks (300 queries, window 100: tiles start at their first query's window), a cache
// (130 queries of 262 keys), a one-key window, padded keys; the sinks' gradient too.
TEST(CpuAttentionWindow, MatchesReference) {
  struct Case {
    int64_t Tq, Tk, window;
    bool masked, sinks;
  };
  for (const Case& c : {Case{300, 300, 100, true, true}, Case{130, 262, 50, false, false}, Case{17, 17, 1, false, true},
                        Case{1, 9, 4, true, true}, Case{300, 300, 300, false, true}}) {
    Context ctx;
    ref::AttnShape s{2, c.Tq, c.Tk, 6, 2, 16};
    s.window = c.window;
    auto q = cast<float>(randn<double>(s.B * s.Tq * s.H * s.D, 30)), k = cast<float>(randn<double>(s.B * s.Tk * s.Hkv * s.D, 31)),
         v = cast<float>(randn<double>(s.B * s.Tk * s.Hkv * s.D, 32)), dout = cast<float>(randn<double>(q.size(), 33));
    const std::vector<float> sk = {0.5f, -2.f, 8.f, 0.f, 1.f, -0.5f};
    const float* sinks = c.sinks ? sk.data() : nullptr;
    std::vector<uint8_t> mask(s.B * s.Tk, 1);
    if (c.masked) mask[0] = mask[s.Tk + 2] = mask[2 * s.Tk - 1] = 0;
    auto qd = cast<double>(q), kd = cast<double>(k), vd = cast<double>(v), dd = cast<double>(dout), skd = cast<double>(sk);
    std::vector<float> o(q.size()), lse(s.B * s.H * s.Tq), dq(q.size()), dk(k.size()), dv(v.size()), ds(6);
    std::vector<double> od(q.size()), lsed(lse.size()), dqd(q.size()), dkd(k.size()), dvd(v.size()), dsd(6);
    cpu::attention_fwd(ctx, s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), sinks);
    ref::attention_fwd(s, qd.data(), kd.data(), vd.data(), mask.data(), od.data(), lsed.data(), c.sinks ? skd.data() : nullptr);
    const std::string what = "Tq " + std::to_string(c.Tq) + " window " + std::to_string(c.window);
    expect_close((what + " o").c_str(), o, od);
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(lsed[i])) {
        EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << what << " " << i;
      } else {
        EXPECT_NEAR(lse[i], lsed[i], 1e-5 * (1 + std::abs(lsed[i]))) << what << " " << i;
      }
    }
    cpu::attention_bwd(ctx, s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), dout.data(), dq.data(),
                       dk.data(), dv.data());
    ref::attention_bwd(s, qd.data(), kd.data(), vd.data(), mask.data(), od.data(), lsed.data(), dd.data(), dqd.data(),
                       dkd.data(), dvd.data());
    expect_close((what + " dq").c_str(), dq, dqd);
    expect_close((what + " dk").c_str(), dk, dkd);
    expect_close((what + " dv").c_str(), dv, dvd);
    if (!c.sinks) continue;
    cpu::attention_sink_grad(ctx, s, sk.data(), o.data(), lse.data(), dout.data(), ds.data());
    ref::attention_sink_grad(s, skd.data(), od.data(), lsed.data(), dd.data(), dsd.data());
    expect_close((what + " dsinks").c_str(), ds, dsd);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuAttention,
                         ::testing::Values(std::make_tuple(17, 17, false), std::make_tuple(17, 17, true),
                                           std::make_tuple(1, 9, true), std::make_tuple(4, 11, false),
                                           // several query tiles (128 positions each), with and without a cache
                                           std::make_tuple(300, 300, true), std::make_tuple(130, 262, false)));

TEST(CpuKernels, SwiGlu) {
  Context ctx;
  const int64_t n = 10007;
  auto g = cast<float>(randn<double>(n, 14, 3.0)), u = cast<float>(randn<double>(n, 15)),
       da = cast<float>(randn<double>(n, 16));
  auto gd = cast<double>(g), ud = cast<double>(u), dad = cast<double>(da);
  std::vector<float> a(n), dg(n), du(n);
  std::vector<double> ad(n), dgd(n), dud(n);
  cpu::swiglu_fwd(ctx, g.data(), u.data(), a.data(), n);
  ref::swiglu_fwd(gd.data(), ud.data(), ad.data(), n);
  expect_close("a", a, ad);
  cpu::swiglu_bwd(ctx, da.data(), g.data(), u.data(), dg.data(), du.data(), n);
  ref::swiglu_bwd(dad.data(), gd.data(), ud.data(), dgd.data(), dud.data(), n);
  expect_close("dg", dg, dgd);
  expect_close("du", du, dud);
}

// The CPU gate kernels (forward and backward) of `act` against the double reference; the CPU's dg, du.
std::pair<std::vector<float>, std::vector<float>> expect_gate_matches_ref(const GateAct& act, const std::vector<float>& g,
                                                                          const std::vector<float>& u,
                                                                          const std::vector<float>& da) {
  Context ctx(Device{}, 2);
  const int64_t n = int64_t(g.size());
  auto gd = cast<double>(g), ud = cast<double>(u), dad = cast<double>(da);
  std::vector<float> a(g.size()), dg(g.size()), du(g.size());
  std::vector<double> ad(g.size()), dgd(g.size()), dud(g.size());
  cpu::swiglu_fwd(ctx, g.data(), u.data(), a.data(), n, act);
  ref::gate_fwd(act, gd.data(), ud.data(), ad.data(), n);
  expect_close("a", a, ad);
  cpu::swiglu_bwd(ctx, da.data(), g.data(), u.data(), dg.data(), du.data(), n, act);
  ref::gate_bwd(act, dad.data(), gd.data(), ud.data(), dgd.data(), dud.data(), n);
  expect_close("dg", dg, dgd);
  expect_close("du", du, dud);
  return {dg, du};
}

// gpt-oss's clamped SwiGLU against the double reference, with gate and up values on both sides of the
// clamp and exactly at it.
TEST(CpuKernels, ClampedSwiGlu) {
  const int64_t n = 10007;
  const GateAct act{GateKind::ClampedSwiglu, 1.702f, 1.5f};
  auto g = cast<float>(randn<double>(n, 24, 3.0)), u = cast<float>(randn<double>(n, 25, 3.0)),
       da = cast<float>(randn<double>(n, 26));
  g[0] = u[1] = 1.5f;
  u[2] = -1.5f;
  const auto [dg, du] = expect_gate_matches_ref(act, g, u, da);
  size_t clamped_g = 0, clamped_u = 0;
  for (int64_t i = 0; i < n; ++i) {
    clamped_g += g[size_t(i)] > 1.5f;
    clamped_u += std::abs(u[size_t(i)]) > 1.5f;
    if (g[size_t(i)] > 1.5f) {
      EXPECT_EQ(dg[size_t(i)], 0.f) << i;
    }
    if (std::abs(u[size_t(i)]) > 1.5f) {
      EXPECT_EQ(du[size_t(i)], 0.f) << i;
    }
  }
  EXPECT_GT(clamped_g, size_t(n / 4));
  EXPECT_GT(clamped_u, size_t(n / 4));
  EXPECT_NE(dg[0], 0.f);  // at the clamp the gradient passes, as torch's clamp lets it
  EXPECT_NE(du[1], 0.f);
  EXPECT_NE(du[2], 0.f);
}

// Gemma's GeLU-tanh gate against the double reference, gates from -12 to 12 (both saturated ends).
TEST(CpuKernels, GeluTanhGate) {
  const int64_t n = 10007;
  const GateAct act{GateKind::GeluTanh};
  auto g = cast<float>(randn<double>(n, 27, 4.0)), u = cast<float>(randn<double>(n, 28)),
       da = cast<float>(randn<double>(n, 29));
  g[0] = 12.f, g[1] = -12.f, g[2] = 0.f;
  expect_gate_matches_ref(act, g, u, da);
}

TEST(CpuKernels, ResidualAdd) {
  Context ctx;
  auto a = cast<float>(randn<double>(999, 1)), b = cast<float>(randn<double>(999, 2));
  std::vector<float> y(999);
  cpu::add(ctx, a.data(), b.data(), y.data(), 999);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], a[i] + b[i]);
}

TEST(CpuKernels, Embedding) {
  Context ctx;
  const int64_t V = 50, dim = 130, rows = 40;
  auto E = cast<float>(randn<double>(V * dim, 17)), dout = cast<float>(randn<double>(rows * dim, 18));
  std::vector<int32_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r) ids[r] = int32_t((r * 13) % V);
  ids[5] = ids[6];  // repeated id accumulates
  auto Ed = cast<double>(E), doutd = cast<double>(dout);
  std::vector<float> out(rows * dim), dE(V * dim, 0.f);
  std::vector<double> outd(rows * dim), dEd(V * dim, 0.0);
  cpu::embedding_fwd(ctx, E.data(), ids.data(), out.data(), rows, dim);
  ref::embedding_fwd(Ed.data(), ids.data(), outd.data(), rows, dim);
  expect_close("out", out, outd, 0);
  cpu::embedding_bwd(ctx, dout.data(), ids.data(), dE.data(), rows, dim);
  ref::embedding_bwd(doutd.data(), ids.data(), dEd.data(), rows, dim);
  expect_close("dE", dE, dEd);
}

TEST(CpuKernels, LogSoftmaxCrossEntropy) {
  Context ctx;
  const int64_t rows = 9, V = 301;
  auto z = cast<float>(randn<double>(rows * V, 19, 4.0));
  auto zd = cast<double>(z);
  std::vector<int32_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = r == 3 ? -100 : int32_t(r * 31 % V);
  std::vector<float> logp(rows * V), dz(rows * V);
  std::vector<double> logpd(rows * V), dzd(rows * V);
  cpu::log_softmax(ctx, z.data(), logp.data(), rows, V);
  ref::log_softmax(zd.data(), logpd.data(), rows, V);
  expect_close("logp", logp, logpd);
  double l = cpu::cross_entropy(ctx, z.data(), t.data(), dz.data(), 1.f, rows, V);
  double ld = ref::cross_entropy<double>(zd.data(), t.data(), dzd.data(), 1.0, rows, V);
  EXPECT_NEAR(l, ld, 1e-6 * std::abs(ld));
  expect_close("dz", dz, dzd);
}

// GEMMs are split into row blocks over the pool; the bits must not depend on the thread count (the
// data-parallel lane's --deterministic relies on it), from tiny products (OpenBLAS's small-matrix
// path) to large ones, for all four transpose combinations.
TEST(CpuKernels, GemmBitsDoNotDependOnThreads) {
  Context c1(Device{}, 1), c2(Device{}, 2), c3(Device{}, 3);
  const int64_t sizes[][3] = {{32, 64, 64},   {64, 64, 64},   {96, 128, 64}, {512, 256, 256},
                              {1000, 96, 80}, {1, 8192, 512}, {8, 4096, 300}};  // last two: column splits
  for (const auto& sz : sizes) {
    const int64_t M = sz[0], N = sz[1], K = sz[2];
    auto A = test::randn<float>(size_t(M * K), 3, 1.0), B = test::randn<float>(size_t(N * K), 4, 1.0);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      std::vector<float> r1(size_t(M * N)), r2(r1.size(), 1.f), r3(r1.size(), 2.f);
      cpu::gemm(c1, ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, r1.data(), N);
      cpu::gemm(c2, ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, r2.data(), N);
      cpu::gemm(c3, ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, r3.data(), N);
      EXPECT_TRUE(r1 == r2 && r1 == r3) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb;
    }
  }
}
