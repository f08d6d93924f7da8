// Whole decoder block: reference backward (double) vs central finite differences for the input and
// every weight, and the fp32 CPU block vs the double reference block (forward and all gradients).
// Variants: plain Llama, Qwen2-style q/k/v bias (+ o bias as Llama attention_bias), Qwen3 q/k norm,
// padding mask, Gemma 3 (sandwich norms, GeLU-tanh, a softmax scale of its own, a 3-key window), Gated
// DeltaNet (its conv, decay, delta rule and gated norm; a padded token; Qwen3.5's split projections too),
// Qwen3-Next's gated attention
// (the sigmoid output gate, partial RoPE, biases, q/k norm, a padded token). With FP8_STATIC's activation QDQ
// in front of every Linear (ActQdq), the straight-
// through gradients against finite differences of the surrogate they are the exact gradients of, and
// the fp32 block against the double one.
#include <map>

#include "block_case.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "model/block_impl.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {

class BlockTest : public ::testing::TestWithParam<Variant> {};

TEST_P(BlockTest, ReferenceBackwardMatchesFiniteDifferences) {
  BlockCase s(GetParam());
  ref::RefOps<double> ops;
  BlockRunner<ref::RefOps<double>> run(ops, s.d);
  BlockAux<double> aux{s.B, s.T, s.pos.data(), s.cs.data(), s.sn.data(), s.key_mask()};
  std::vector<double> y(s.x.size());
  auto loss = [&] {
    BlockRunner<ref::RefOps<double>>::Cache c;
    run.forward(Weights::ptrs<const double*>(s.w.t), aux, s.x.data(), y.data(), c);
    return dot(y, s.R);
  };
  std::map<std::string, std::vector<double>> grads;
  for (auto& [k, v] : s.w.t) grads[k].assign(v.size(), 0.0);
  std::vector<double> dx(s.x.size());
  BlockRunner<ref::RefOps<double>>::Cache c;
  run.forward(Weights::ptrs<const double*>(s.w.t), aux, s.x.data(), y.data(), c);
  run.backward(Weights::ptrs<const double*>(s.w.t), aux, c, s.R.data(), dx.data(), Weights::ptrs<double*>(grads));
  expect_grad_matches_fd("dx", s.x, dx, loss, 1e-6, 200);
  for (auto& [k, v] : s.w.t) expect_grad_matches_fd("d" + k, v, grads[k], loss, 1e-6, 200);
}

// The reference ops with the activation QDQ replaced by the surrogate whose exact gradients are the
// straight-through ones: record() keeps each Linear's input x0 and QDQ q0; afterwards a Linear reads
//   q0 + mask (x - x0) + eps[k] r(x0),  mask: |u| < 448, r = e4m3(u) - u there, 448 sign(u) elsewhere
// (dq/ds of the QDQ at x0), so d loss / d x, d W and d eps[k] (= dL/ds) are what backward must give.
struct SurrogateOps : ref::RefOps<double> {
  bool recording = true;
  int call = 0;
  std::vector<std::vector<double>> x0, q0;
  double eps[7] = {};
  double max_abs[7] = {};
  Operand act_qdq_operand(const Operand& x, double s, int64_t n) {
    const int k = call++ % slots;
    if (recording) {
      Operand q = ref::RefOps<double>::act_qdq_operand(x, s, n);
      x0[size_t(k)].assign(x.x, x.x + n);
      q0[size_t(k)].assign(q.x, q.x + n);
      for (int64_t i = 0; i < n; ++i) max_abs[k] = std::max(max_abs[k], std::abs(x.x[i]));
      return q;
    }
    Buf y = alloc(n);
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x0[size_t(k)][size_t(i)];
      const double u = xi / s;
      const bool pass = std::abs(u) < 448.0;
      const double r = pass ? double(e4m3_round(float(u))) - u : std::copysign(448.0, u);
      y[size_t(i)] = q0[size_t(k)][size_t(i)] + (pass ? x.x[i] - xi : 0.0) + eps[k] * r;
    }
    Operand o;
    o.own = std::move(y);
    o.x = o.own.data();
    return o;
  }
  int slots = 7;  // the block's Linears (BlockDims::attn_linears() + 3)
  SurrogateOps() : x0(7), q0(7) {}
};

// Every Linear quantized; scales from a first pass's input maxima, some below them (clipping).
ActQdq<double> clipping_scales(BlockCase& s, SurrogateOps& ops, BlockRunner<SurrogateOps>& run,
                               const BlockAux<double>& aux) {
  const int n = int(s.d.attn_linears()) + 3;
  ops.slots = n;
  ActQdq<double> probe;
  probe.s.assign(size_t(n), 1.0);
  std::vector<double> y(s.x.size());
  BlockRunner<SurrogateOps>::Cache c;
  run.forward(Weights::ptrs<const double*>(s.w.t), aux, s.x.data(), y.data(), c, nullptr, &probe);
  const double factor[7] = {0.7, 1.5, 0.6, 0.8, 1.2, 0.7, 0.5};
  ActQdq<double> a;
  a.s.resize(size_t(n));
  const int attn = int(s.d.attn_linears());  // the feed-forward's slots take the last three factors
  for (int k = 0; k < n; ++k) a.s[k] = factor[k < attn ? k : 4 + k - attn] * ops.max_abs[k] / 448.0;
  return a;
}

TEST_P(BlockTest, ActivationQdqGradientsMatchTheirSurrogate) {
  BlockCase s(GetParam());
  SurrogateOps ops;
  BlockRunner<SurrogateOps> run(ops, s.d);
  BlockAux<double> aux{s.B, s.T, s.pos.data(), s.cs.data(), s.sn.data(), s.key_mask()};
  const ActQdq<double> act = clipping_scales(s, ops, run, aux);
  std::vector<double> y(s.x.size()), dx(s.x.size());
  ops.recording = true;
  BlockRunner<SurrogateOps>::Cache c;
  run.forward(Weights::ptrs<const double*>(s.w.t), aux, s.x.data(), y.data(), c, nullptr, &act);
  int clipped = 0;
  for (int k = 0; k < ops.slots; ++k)
    for (double v : ops.x0[size_t(k)]) clipped += std::abs(v / act.s[k]) > 448.0;
  EXPECT_GT(clipped, 0) << "no element clipped: the clamp's mask goes untested";
  std::map<std::string, std::vector<double>> grads;
  for (auto& [k, v] : s.w.t) grads[k].assign(v.size(), 0.0);
  double dscale[7] = {};
  run.backward(Weights::ptrs<const double*>(s.w.t), aux, c, s.R.data(), dx.data(), Weights::ptrs<double*>(grads),
               true, dscale);
  ops.recording = false;
  auto loss = [&] {
    BlockRunner<SurrogateOps>::Cache cc;
    ops.call = 0;
    run.forward(Weights::ptrs<const double*>(s.w.t), aux, s.x.data(), y.data(), cc, nullptr, &act);
    return dot(y, s.R);
  };
  expect_grad_matches_fd("dx", s.x, dx, loss, 1e-6, 200);
  for (auto& [k, v] : s.w.t) expect_grad_matches_fd("d" + k, v, grads[k], loss, 1e-6, 200);
  for (int k = 0; k < ops.slots; ++k) {
    // eps in units of 1/64: a step of 1e-6 in eps itself moves a clipped element by 4.5e-4, where the
    // central difference's truncation error reaches 1e-6 of the gradient.
    std::vector<double> e{0.0}, de{dscale[k] / 64};
    auto loss_k = [&] {
      ops.eps[k] = e[0] / 64;
      const double l = loss();
      ops.eps[k] = 0;
      return l;
    };
    expect_grad_matches_fd("dscale[" + std::to_string(k) + "]", e, de, loss_k, 1e-6, 1);
  }
}

// The fp32 CPU block against the double reference block (forward, input and every weight gradient,
// and with activation QDQ dL/ds), every input rounded to fp32 first so both paths see identical data;
// then without dx (what tuning asks for) the weight gradients and dL/ds are the same bits and ln1 gets
// none.
void expect_cpu_matches_reference(const Variant& v, bool with_act) {
  BlockCase s(v);
  std::map<std::string, std::vector<float>> wf;
  for (auto& [k, w] : s.w.t) { wf[k] = cast<float>(w); w = cast<double>(wf[k]); }
  auto xf = cast<float>(s.x), Rf = cast<float>(s.R), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  s.x = cast<double>(xf); s.R = cast<double>(Rf); s.cs = cast<double>(csf); s.sn = cast<double>(snf);
  BlockAux<double> raux{s.B, s.T, s.pos.data(), s.cs.data(), s.sn.data(), s.key_mask()};
  ActQdq<double> act;
  ActQdq<float> actf;
  if (with_act) {
    SurrogateOps probe_ops;
    BlockRunner<SurrogateOps> probe(probe_ops, s.d);
    act = clipping_scales(s, probe_ops, probe, raux);
    actf.s.resize(act.s.size());
    for (size_t k = 0; k < act.s.size(); ++k) { actf.s[k] = float(act.s[k]); act.s[k] = actf.s[k]; }
  }

  ref::RefOps<double> rops;
  BlockRunner<ref::RefOps<double>> rrun(rops, s.d);
  std::vector<double> y(s.x.size()), dx(s.x.size());
  std::map<std::string, std::vector<double>> g;
  for (auto& [k, w] : s.w.t) g[k].assign(w.size(), 0.0);
  double ds[7] = {};
  BlockRunner<ref::RefOps<double>>::Cache rc;
  rrun.forward(Weights::ptrs<const double*>(s.w.t), raux, s.x.data(), y.data(), rc, nullptr, with_act ? &act : nullptr);
  rrun.backward(Weights::ptrs<const double*>(s.w.t), raux, rc, s.R.data(), dx.data(), Weights::ptrs<double*>(g),
                true, ds);

  Context ctx(Device{}, 2);
  cpu::CpuOps cops{ctx};
  BlockRunner<cpu::CpuOps> crun(cops, s.d);
  BlockAux<float> caux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), s.key_mask()};
  std::vector<float> yf(xf.size()), dxf(xf.size());
  std::map<std::string, std::vector<float>> gf;
  for (auto& [k, w] : wf) gf[k].assign(w.size(), 0.f);
  float dsf[7] = {};
  BlockRunner<cpu::CpuOps>::Cache cc;
  crun.forward(Weights::ptrs<const float*>(wf), caux, xf.data(), yf.data(), cc, nullptr, with_act ? &actf : nullptr);
  crun.backward(Weights::ptrs<const float*>(wf), caux, cc, Rf.data(), dxf.data(), Weights::ptrs<float*>(gf), true,
                dsf);
  EXPECT_LT(rel_err(yf.data(), y.data(), y.size()), 1e-5) << "y";
  EXPECT_LT(rel_err(dxf.data(), dx.data(), dx.size()), 1e-5) << "dx";
  for (auto& [k, w] : g) EXPECT_LT(rel_err(gf[k].data(), w.data(), w.size()), 1e-5) << "d" << k;
  if (with_act) {
    EXPECT_LT(rel_err(dsf, ds, s.d.attn_linears() + 3), 1e-5) << "dscale";
  }

  std::map<std::string, std::vector<float>> gn;
  for (auto& [k, w] : wf) gn[k].assign(w.size(), 0.f);
  auto gp = Weights::ptrs<float*>(gn);
  gp.ln1 = nullptr;
  float dsn[7] = {};
  crun.backward(Weights::ptrs<const float*>(wf), caux, cc, Rf.data(), nullptr, gp, true, dsn);
  for (auto& [k, w] : gn) {
    if (k != "ln1") {
      EXPECT_TRUE(w == gf[k]) << "d" << k << " differs without dx";
    }
  }
  for (int k = 0; k < int(s.d.attn_linears()) + 3; ++k) EXPECT_EQ(dsn[k], dsf[k]) << k;
}

TEST_P(BlockTest, CpuBlockMatchesReference) { expect_cpu_matches_reference(GetParam(), false); }

TEST_P(BlockTest, CpuBlockWithActivationQdqMatchesReference) { expect_cpu_matches_reference(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Variants, BlockTest,
                         ::testing::Values(Variant{"llama", false, false, false}, Variant{"bias", true, false, false},
                                           Variant{"qwen3", false, true, false}, Variant{"masked", true, true, true},
                                           Variant{"gemma3", false, true, false, true},
                                           Variant{"deltanet", false, false, true, false, true},
                                           Variant{"gated", true, true, true, false, false, true},
                                           Variant{"deltanet_split", false, false, true, false, true, false, true}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
