// Reference backward of every op vs central finite differences in double.
// Loss L = <R, f(inputs)> for a fixed random R, so dL/dout = R.
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

TEST(RefFd, Linear) {
  const int64_t n = 5, in = 7, out = 6;
  auto x = randn<double>(n * in, 1), W = randn<double>(out * in, 2), b = randn<double>(out, 3),
       R = randn<double>(n * out, 4);
  std::vector<double> y(n * out), dx(n * in), dW(out * in, 0), db(out, 0);
  auto loss = [&] { ref::linear_fwd(x.data(), W.data(), b.data(), y.data(), n, in, out); return dot(y, R); };
  ref::linear_bwd(R.data(), x.data(), W.data(), dx.data(), false, dW.data(), db.data(), n, in, out);
  expect_grad_matches_fd("dx", x, dx, loss);
  expect_grad_matches_fd("dW", W, dW, loss);
  expect_grad_matches_fd("db", b, db, loss);
}

TEST(RefFd, RmsNorm) {
  const int64_t rows = 4, dim = 9;
  auto x = randn<double>(rows * dim, 5), w = randn<double>(dim, 6), R = randn<double>(rows * dim, 7);
  std::vector<double> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0);
  auto loss = [&] { ref::rmsnorm_fwd(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-5); return dot(y, R); };
  loss();
  ref::rmsnorm_bwd(R.data(), x.data(), w.data(), rstd.data(), dx.data(), false, dw.data(), rows, dim);
  expect_grad_matches_fd("dx", x, dx, loss);
  expect_grad_matches_fd("dw", w, dw, loss);
}

// Every RopeDims layout: whole heads, a head's first dims (partial RoPE), the last dims interleaved (MLA).
TEST(RefFd, Rope) {
  const int64_t rows = 3, heads = 2, D = 8, maxpos = 10;
  for (const RopeDims rd : {RopeDims::full(D), RopeDims{D, 0, 4, false}, RopeDims{D, 4, 4, true}, RopeDims{D, 0, D, true}}) {
    auto x = randn<double>(rows * heads * D, 8), R = randn<double>(rows * heads * D, 9);
    const int64_t half = rd.dims / 2;
    std::vector<double> cs(maxpos * half), sn(maxpos * half);
    for (int64_t p = 0; p < maxpos; ++p)
      for (int64_t i = 0; i < half; ++i) {
        double a = p * std::pow(10000.0, -2.0 * i / rd.dims);
        cs[p * half + i] = std::cos(a);
        sn[p * half + i] = std::sin(a);
      }
    std::vector<int32_t> pos = {0, 4, 9};
    auto loss = [&] {
      auto y = x;
      ref::rope_fwd(y.data(), pos.data(), cs.data(), sn.data(), rows, heads, rd);
      return dot(y, R);
    };
    auto dx = R;
    ref::rope_bwd(dx.data(), pos.data(), cs.data(), sn.data(), rows, heads, rd);
    expect_grad_matches_fd("dx off " + std::to_string(rd.off) + " dims " + std::to_string(rd.dims), x, dx, loss);
    // The elements outside the rotated range pass through.
    auto y = x;
    ref::rope_fwd(y.data(), pos.data(), cs.data(), sn.data(), rows, heads, rd);
    for (int64_t r = 0; r < rows * heads; ++r)
      for (int64_t e = 0; e < D; ++e)
        if (e < rd.off || e >= rd.off + rd.dims) {
          EXPECT_EQ(y[r * D + e], x[r * D + e]);
        }
  }
}

TEST(RefFd, AttentionGqaWithMask) {
  ref::AttnShape s{2, 5, 5, 4, 2, 3};
  auto q = randn<double>(s.B * s.Tq * s.H * s.D, 10), k = randn<double>(s.B * s.Tk * s.Hkv * s.D, 11),
       v = randn<double>(s.B * s.Tk * s.Hkv * s.D, 12), R = randn<double>(q.size(), 13);
  std::vector<uint8_t> mask = {1, 1, 1, 1, 1, 0, 1, 1, 0, 1};  // sample 1: pads at 0 and 3
  std::vector<double> o(q.size()), lse(s.B * s.H * s.Tq), dq(q.size()), dk(k.size()), dv(v.size());
  auto loss = [&] { ref::attention_fwd(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data()); return dot(o, R); };
  loss();
  ref::attention_bwd(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), R.data(), dq.data(),
                     dk.data(), dv.data());
  expect_grad_matches_fd("dq", q, dq, loss, 1e-6, 1000);
  expect_grad_matches_fd("dk", k, dk, loss, 1e-6, 1000);
  expect_grad_matches_fd("dv", v, dv, loss, 1e-6, 1000);
  // Sample 1, query 0 sees no key: output 0 and lse -inf.
  EXPECT_EQ(lse[(1 * s.H + 0) * s.Tq + 0], -std::numeric_limits<double>::infinity());
}

// A sliding window (query p sees keys p - window < j <= p) and attention sinks (a per-head logit in the
// softmax's denominator): every input's gradient, the sinks' included, against finite differences; one
// sink larger than every score; a row whose window holds only padded keys keeps its sink alone (o = 0,
// lse = the sink); queries behind a cache (Tq < Tk).
TEST(RefFd, AttentionSlidingWindowAndSinks) {
  for (const auto& [Tq, window] : {std::pair<int64_t, int64_t>{7, 2}, {3, 3}, {7, 1}}) {
    ref::AttnShape s{2, Tq, 7, 4, 2, 3};
    s.window = window;
    auto q = randn<double>(s.B * s.Tq * s.H * s.D, 20), k = randn<double>(s.B * s.Tk * s.Hkv * s.D, 21),
         v = randn<double>(s.B * s.Tk * s.Hkv * s.D, 22), R = randn<double>(q.size(), 23);
    std::vector<double> sinks = {0.3, -1.2, 6.0, 0.0};  // head 2's sink dominates every score
    std::vector<uint8_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1};  // sample 1: keys 2, 3 padded
    std::vector<double> o(q.size()), lse(s.B * s.H * s.Tq), dq(q.size()), dk(k.size()), dv(v.size()), ds(4);
    auto loss = [&] {
      ref::attention_fwd(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), sinks.data());
      return dot(o, R);
    };
    loss();
    ref::attention_bwd(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(), R.data(), dq.data(),
                       dk.data(), dv.data());
    ref::attention_sink_grad(s, sinks.data(), o.data(), lse.data(), R.data(), ds.data());
    expect_grad_matches_fd("dq", q, dq, loss, 1e-6, 1000);
    expect_grad_matches_fd("dk", k, dk, loss, 1e-6, 1000);
    expect_grad_matches_fd("dv", v, dv, loss, 1e-6, 1000);
    expect_grad_matches_fd("dsinks", sinks, ds, loss, 1e-6, 1000);
    loss();  // o and lse at the unperturbed inputs
    if (Tq == 7 && window == 2) {  // sample 1, query 3 sees keys 2 and 3 only, both padded: the sink alone
      for (int64_t h = 0; h < s.H; ++h) {
        EXPECT_EQ(lse[(1 * s.H + h) * s.Tq + 3], sinks[size_t(h)]) << h;
        for (int64_t d = 0; d < s.D; ++d) EXPECT_EQ(o[((1 * s.Tq + 3) * s.H + h) * s.D + d], 0.0);
      }
    }
  }
}

TEST(RefFd, SwiGlu) {
  const int64_t n = 11;
  auto g = randn<double>(n, 14, 2.0), u = randn<double>(n, 15), R = randn<double>(n, 16);
  std::vector<double> a(n), dg(n), du(n);
  auto loss = [&] { ref::swiglu_fwd(g.data(), u.data(), a.data(), n); return dot(a, R); };
  ref::swiglu_bwd(R.data(), g.data(), u.data(), dg.data(), du.data(), n);
  expect_grad_matches_fd("dg", g, dg, loss);
  expect_grad_matches_fd("du", u, du, loss);
}

// gpt-oss's clamped SwiGLU: the gradient against finite differences away from the clamp (gate and up
// on both sides of it), zero beyond it, and passing at it (torch's clamp).
TEST(RefFd, ClampedSwiGlu) {
  const int64_t n = 64;
  const GateAct act{GateKind::ClampedSwiglu, 1.702f, 0.75f};
  auto g = randn<double>(n, 34, 1.5), u = randn<double>(n, 35, 1.5), R = randn<double>(n, 36);
  for (int64_t i = 0; i < n; ++i) {  // keep finite differences off the kinks
    if (std::abs(g[size_t(i)] - 0.75) < 1e-3) g[size_t(i)] += 0.01;
    if (std::abs(std::abs(u[size_t(i)]) - 0.75) < 1e-3) u[size_t(i)] += 0.01;
  }
  std::vector<double> a(n), dg(n), du(n);
  auto loss = [&] { ref::gate_fwd(act, g.data(), u.data(), a.data(), n); return dot(a, R); };
  ref::gate_bwd(act, R.data(), g.data(), u.data(), dg.data(), du.data(), n);
  expect_grad_matches_fd("dg", g, dg, loss, 1e-6, size_t(n));
  expect_grad_matches_fd("du", u, du, loss, 1e-6, size_t(n));
  int beyond = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (g[size_t(i)] > 0.75) {
      EXPECT_EQ(dg[size_t(i)], 0.0);
      ++beyond;
    }
    if (std::abs(u[size_t(i)]) > 0.75) {
      EXPECT_EQ(du[size_t(i)], 0.0);
      ++beyond;
    }
  }
  EXPECT_GT(beyond, 20);
  double dgc, duc;  // exactly at the clamp: torch passes the gradient
  ref::clamped_swiglu_bwd_elem(1.0, 0.75, 0.75, 1.702, 0.75, &dgc, &duc);
  EXPECT_GT(dgc, 0.0);
  EXPECT_GT(duc, 0.0);
}

// Gemma's GeLU-tanh gate against finite differences, with gates far out on both sides (where sigmoid(2z)
// saturates), and its forward against torch's formula g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) u.
TEST(RefFd, GeluTanh) {
  const int64_t n = 64;
  const GateAct act{GateKind::GeluTanh};
  auto g = randn<double>(n, 37, 2.5), u = randn<double>(n, 38), R = randn<double>(n, 39);
  g[0] = 9, g[1] = -9, g[2] = 0;
  std::vector<double> a(n), dg(n), du(n);
  auto loss = [&] { ref::gate_fwd(act, g.data(), u.data(), a.data(), n); return dot(a, R); };
  ref::gate_bwd(act, R.data(), g.data(), u.data(), dg.data(), du.data(), n);
  expect_grad_matches_fd("dg", g, dg, loss);
  expect_grad_matches_fd("du", u, du, loss);
  loss();  // a at the unperturbed inputs
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[size_t(i)], torch = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(a[size_t(i)], torch * u[size_t(i)], 1e-14 * (1 + std::abs(a[size_t(i)]))) << i;
  }
}

TEST(RefFd, Embedding) {
  const int64_t V = 6, dim = 4, rows = 5;
  auto E = randn<double>(V * dim, 17), R = randn<double>(rows * dim, 18);
  std::vector<int32_t> ids = {1, 3, 1, 5, 0};
  std::vector<double> out(rows * dim), dE(V * dim, 0);
  auto loss = [&] { ref::embedding_fwd(E.data(), ids.data(), out.data(), rows, dim); return dot(out, R); };
  ref::embedding_bwd(R.data(), ids.data(), dE.data(), rows, dim);
  expect_grad_matches_fd("dE", E, dE, loss);
}

TEST(RefFd, CrossEntropyAndLogSoftmax) {
  const int64_t rows = 4, V = 7;
  auto z = randn<double>(rows * V, 19, 3.0);
  std::vector<int32_t> t = {2, -100, 6, 0};
  std::vector<double> dz(rows * V);
  auto loss = [&] { return ref::cross_entropy<double>(z.data(), t.data(), nullptr, 1.0, rows, V); };
  ref::cross_entropy<double>(z.data(), t.data(), dz.data(), 1.0, rows, V);
  expect_grad_matches_fd("dz", z, dz, loss);
  std::vector<double> logp(rows * V);
  ref::log_softmax(z.data(), logp.data(), rows, V);
  double mean = -(logp[0 * V + 2] + logp[2 * V + 6] + logp[3 * V + 0]) / 3;
  EXPECT_NEAR(loss(), mean, 1e-12);
}
