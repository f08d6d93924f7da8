// Gated DeltaNet's ops. The layer's row and element ops (kernels/ref/delta_net_ref.h: the causal
// depthwise conv with SiLU, l2norm, the gated RMSNorm, the decay and beta from a and b) against finite
// differences. The gated delta rule: the double reference's backward against central finite
// differences (grouped value heads, decays near 1 and near 0, beta near 0 and 1), its forward against the
// one-token closed form; the fp32 CPU kernel against the reference across chunk boundaries and on a long
// sequence, the same bits on every thread count, and a forward continued from a final state equal to
// one pass.
#include <cstring>

#include "core/context.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/delta_net_ref.h"
#include "kernels/ref/gated_delta_ref.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;
using ref::DeltaShape;

namespace {

// Inputs as the module makes them: q, k of unit norm (q scaled by Dk^-1/2), g = -exp(A) softplus(.) <= 0,
// beta = sigmoid(.) in (0, 1). g_lo..g_hi spans the decays.
struct DeltaInputs {
  std::vector<double> q, k, v, g, beta;
  DeltaInputs(const DeltaShape& s, uint32_t seed, double g_lo = -3, double g_hi = -0.01) {
    q = randn<double>(size_t(s.B * s.T * s.Hk * s.Dk), seed);
    k = randn<double>(q.size(), seed + 1);
    v = randn<double>(size_t(s.B * s.T * s.Hv * s.Dv), seed + 2);
    for (auto* x : {&q, &k})
      for (size_t r = 0; r < x->size(); r += size_t(s.Dk)) {
        double n = 0;
        for (int64_t i = 0; i < s.Dk; ++i) n += (*x)[r + size_t(i)] * (*x)[r + size_t(i)];
        for (int64_t i = 0; i < s.Dk; ++i) (*x)[r + size_t(i)] /= std::sqrt(n) * (x == &q ? std::sqrt(double(s.Dk)) : 1);
      }
    const auto ug = randn<double>(size_t(s.B * s.T * s.Hv), seed + 3), ub = randn<double>(ug.size(), seed + 4);
    for (size_t i = 0; i < ug.size(); ++i) {
      g.push_back(g_lo + (g_hi - g_lo) / (1 + std::exp(-ug[i])));
      beta.push_back(1 / (1 + std::exp(-2 * ub[i])));
    }
  }
};

TEST(GatedDeltaRef, OneTokenIsBetaTimesKDotQTimesV) {
  const DeltaShape s{1, 1, 1, 2, 4, 3};
  DeltaInputs in(s, 1);
  std::vector<double> o(size_t(s.Hv * s.Dv));
  ref::gated_delta_fwd(s, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o.data());
  double kq = 0;
  for (int64_t i = 0; i < s.Dk; ++i) kq += in.k[size_t(i)] * in.q[size_t(i)];
  for (int64_t h = 0; h < s.Hv; ++h)
    for (int64_t j = 0; j < s.Dv; ++j)
      EXPECT_NEAR(o[size_t(h * s.Dv + j)], in.beta[size_t(h)] * kq * in.v[size_t(h * s.Dv + j)], 1e-15);
}

// Every input's gradient against finite differences: two batch rows, two value heads on one key head.
TEST(GatedDeltaRef, BackwardMatchesFiniteDifferences) {
  const DeltaShape s{2, 7, 1, 2, 3, 4};
  for (const auto& [lo, hi] : {std::pair{-3.0, -0.01}, {-1e-3, -1e-6}, {-14.0, -9.0}}) {  // decays: mixed, ~1, ~0
    SCOPED_TRACE(lo);
    DeltaInputs in(s, 7);
    in = DeltaInputs(s, 7, lo, hi);
    const auto R = randn<double>(in.v.size(), 12);
    std::vector<double> o(in.v.size()), dq(in.q.size()), dk(in.k.size()), dv(in.v.size()), dg(in.g.size()),
        db(in.beta.size());
    auto loss = [&] {
      ref::gated_delta_fwd(s, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o.data());
      return dot(o, R);
    };
    ref::gated_delta_bwd(s, R.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), dq.data(),
                         dk.data(), dv.data(), dg.data(), db.data());
    expect_grad_matches_fd("dq", in.q, dq, loss);
    expect_grad_matches_fd("dk", in.k, dk, loss);
    expect_grad_matches_fd("dv", in.v, dv, loss);
    expect_grad_matches_fd("dg", in.g, dg, loss);
    expect_grad_matches_fd("dbeta", in.beta, db, loss);
  }
}

// Loss <R, f(x)> for each op; the conv's window of K = 4 reaches before the sequence's start.
TEST(DeltaNetOpsRef, BackwardsMatchFiniteDifferences) {
  const int64_t B = 2, Tn = 6, C = 5, K = 4, rows = B * Tn, H = 3, D = 7;
  {
    auto x = randn<double>(size_t(B * Tn * C), 60), w = randn<double>(size_t(C * K), 61), R = randn<double>(x.size(), 62);
    std::vector<double> y(x.size()), z(x.size()), dx(x.size()), dw(w.size(), 0.0);
    auto loss = [&] { ref::causal_conv_silu_fwd(x.data(), w.data(), y.data(), z.data(), B, Tn, C, K); return dot(y, R); };
    loss();
    ref::causal_conv_silu_bwd(R.data(), z.data(), x.data(), w.data(), dx.data(), dw.data(), B, Tn, C, K);
    expect_grad_matches_fd("conv dx", x, dx, loss);
    expect_grad_matches_fd("conv dw", w, dw, loss);
    // the first token sees only itself: y = silu(w[c, K-1] x)
    const double z0 = w[size_t(K - 1)] * x[0];
    EXPECT_NEAR(y[0], z0 / (1 + std::exp(-z0)), 1e-15);
  }
  {
    auto x = randn<double>(size_t(rows * D), 63), R = randn<double>(x.size(), 64);
    std::vector<double> y(x.size()), dx(x.size());
    auto loss = [&] { ref::l2norm_fwd(x.data(), y.data(), rows, D, 0.3); return dot(y, R); };
    ref::l2norm_bwd(R.data(), x.data(), dx.data(), rows, D, 0.3);
    expect_grad_matches_fd("l2norm dx", x, dx, loss);
  }
  {
    auto x = randn<double>(size_t(rows * D), 65), z = randn<double>(x.size(), 66, 2.0), w = randn<double>(size_t(D), 67),
         R = randn<double>(x.size(), 68);
    std::vector<double> y(x.size()), dx(x.size()), dz(x.size()), dw(w.size(), 0.0);
    auto loss = [&] { ref::gated_rmsnorm_fwd(x.data(), z.data(), w.data(), y.data(), rows, D, 1e-6); return dot(y, R); };
    ref::gated_rmsnorm_bwd(R.data(), x.data(), z.data(), w.data(), dx.data(), dz.data(), dw.data(), rows, D, 1e-6);
    expect_grad_matches_fd("gated rmsnorm dx", x, dx, loss);
    expect_grad_matches_fd("gated rmsnorm dz", z, dz, loss);
    expect_grad_matches_fd("gated rmsnorm dw", w, dw, loss);
  }
  {
    auto a = randn<double>(size_t(rows * H), 69, 3.0), b = randn<double>(a.size(), 70, 3.0),
         A_log = randn<double>(size_t(H), 71), dt = randn<double>(size_t(H), 72), Rg = randn<double>(a.size(), 73),
         Rb = randn<double>(a.size(), 74);
    a[0] = 25 - dt[0];  // softplus's linear branch
    std::vector<double> g(a.size()), beta(a.size()), da(a.size()), db(a.size()), dA(size_t(H), 0.0), ddt(size_t(H), 0.0);
    auto loss = [&] {
      ref::decay_beta_fwd(a.data(), b.data(), A_log.data(), dt.data(), g.data(), beta.data(), rows, H);
      return dot(g, Rg) + dot(beta, Rb);
    };
    ref::decay_beta_bwd(Rg.data(), Rb.data(), a.data(), b.data(), A_log.data(), dt.data(), da.data(), db.data(),
                        dA.data(), ddt.data(), rows, H);
    expect_grad_matches_fd("decay da", a, da, loss);
    expect_grad_matches_fd("beta db", b, db, loss);
    expect_grad_matches_fd("dA_log", A_log, dA, loss);
    expect_grad_matches_fd("ddt_bias", dt, ddt, loss);
    loss();
    for (double x : g) EXPECT_LT(x, 0);
  }
}

struct CpuRun {
  std::vector<float> o, dq, dk, dv, dg, db;
};
CpuRun cpu_run(Context& ctx, const DeltaShape& s, const DeltaInputs& in, const std::vector<double>& R) {
  const auto q = cast<float>(in.q), k = cast<float>(in.k), v = cast<float>(in.v), g = cast<float>(in.g),
             beta = cast<float>(in.beta), dO = cast<float>(R);
  CpuRun r{std::vector<float>(v.size()), std::vector<float>(q.size()), std::vector<float>(k.size()),
           std::vector<float>(v.size()), std::vector<float>(g.size()), std::vector<float>(g.size())};
  std::vector<float> ck(size_t(cpu::gated_delta_checkpoint_floats(s)));
  cpu::gated_delta_fwd(ctx, s, q.data(), k.data(), v.data(), g.data(), beta.data(), r.o.data(), ck.data());
  cpu::gated_delta_bwd(ctx, s, dO.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), ck.data(), r.dq.data(),
                       r.dk.data(), r.dv.data(), r.dg.data(), r.db.data());
  return r;
}

// Sequence lengths around the checkpoint chunk (kDeltaChunk = 64) and a long one with slow decay.
TEST(GatedDeltaCpu, MatchesReference) {
  for (const int64_t T : {1, 63, 64, 65, 150, 700}) {
    SCOPED_TRACE(T);
    const DeltaShape s{2, T, 2, 4, 16, 8};
    const DeltaInputs in = T == 700 ? DeltaInputs(s, 30, -0.05, -1e-4) : DeltaInputs(s, 30);
    const auto R = randn<double>(in.v.size(), 31);
    std::vector<double> o(in.v.size()), dq(in.q.size()), dk(in.k.size()), dv(in.v.size()), dg(in.g.size()),
        db(in.beta.size());
    ref::gated_delta_fwd(s, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), o.data());
    ref::gated_delta_bwd(s, R.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), dq.data(),
                         dk.data(), dv.data(), dg.data(), db.data());
    Context ctx(Device{}, 2);
    const CpuRun r = cpu_run(ctx, s, in, R);
    const double tol = T == 700 ? 2e-4 : 5e-5;  // fp32 through hundreds of state updates
    EXPECT_LE(rel_err(r.o.data(), o.data(), o.size()), tol) << "o";
    EXPECT_LE(rel_err(r.dq.data(), dq.data(), dq.size()), tol) << "dq";
    EXPECT_LE(rel_err(r.dk.data(), dk.data(), dk.size()), tol) << "dk";
    EXPECT_LE(rel_err(r.dv.data(), dv.data(), dv.size()), tol) << "dv";
    EXPECT_LE(rel_err(r.dg.data(), dg.data(), dg.size()), tol) << "dg";
    EXPECT_LE(rel_err(r.db.data(), db.data(), db.size()), tol) << "dbeta";
  }
}

TEST(GatedDeltaCpu, EveryThreadCountGivesTheSameBits) {
  const DeltaShape s{3, 130, 2, 6, 16, 8};
  const DeltaInputs in(s, 40);
  const auto R = randn<double>(in.v.size(), 41);
  Context one(Device{}, 1);
  const CpuRun a = cpu_run(one, s, in, R);
  for (int threads : {2, 3}) {
    Context ctx(Device{}, threads);
    const CpuRun b = cpu_run(ctx, s, in, R);
    for (const auto& [x, y] : {std::pair{&a.o, &b.o}, {&a.dq, &b.dq}, {&a.dk, &b.dk}, {&a.dv, &b.dv}, {&a.dg, &b.dg},
                               {&a.db, &b.db}})
      EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * 4), 0) << threads << " threads";
  }
}

// The state as the decode cache: a forward over tokens [0, 40) then [40, 100) from its final state gives
// the one-pass outputs and final state bit for bit.
TEST(GatedDeltaCpu, ContinuesFromAFinalState) {
  const DeltaShape s{1, 100, 1, 2, 8, 8}, first{1, 40, 1, 2, 8, 8}, rest{1, 60, 1, 2, 8, 8};
  const DeltaInputs in(s, 50);
  const auto q = cast<float>(in.q), k = cast<float>(in.k), v = cast<float>(in.v), g = cast<float>(in.g),
             beta = cast<float>(in.beta);
  Context ctx(Device{}, 2);
  std::vector<float> o(v.size()), fin(size_t(s.Hv * s.Dk * s.Dv)), o2(v.size()), mid(fin.size()), fin2(fin.size());
  cpu::gated_delta_fwd(ctx, s, q.data(), k.data(), v.data(), g.data(), beta.data(), o.data(), nullptr, nullptr,
                       fin.data());
  cpu::gated_delta_fwd(ctx, first, q.data(), k.data(), v.data(), g.data(), beta.data(), o2.data(), nullptr, nullptr,
                       mid.data());
  const size_t qo = size_t(40 * s.Hk * s.Dk), vo = size_t(40 * s.Hv * s.Dv), go = size_t(40 * s.Hv);
  cpu::gated_delta_fwd(ctx, rest, q.data() + qo, k.data() + qo, v.data() + vo, g.data() + go, beta.data() + go,
                       o2.data() + vo, nullptr, mid.data(), fin2.data());
  EXPECT_EQ(std::memcmp(o.data(), o2.data(), o.size() * 4), 0);
  EXPECT_EQ(std::memcmp(fin.data(), fin2.data(), fin.size() * 4), 0);
}

}  // namespace
