// The mixture-of-experts decoder block (model/moe_ffn.h inside model/block_impl.h): the double
// reference backward against central finite differences for the input and every weight (router,
// experts, shared expert and gate, attention), the fp32 CPU block against the double one, the routing
// tie rule, and experts that receive no token. Variants: Qwen3-MoE (top-3 of 8, renormalized, q/k norm),
// Qwen2-MoE (top-2 of 6 not renormalized, shared expert, q/k/v bias), Mixtral (top-2 of 4), DeepSeek-V3's
// routing (sigmoid, score-correction bias, 2 of 4 groups, scaled, an ungated shared expert; and without
// groups or renormalization), gpt-oss's (top-2 of the biased logits, then softmax; attention sinks, a
// sliding window, biased experts with the clamped SwiGLU).
#include <map>

#include "block_case.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "model/block_impl.h"
#include "quant/expert_grad_tree.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {

struct Variant {
  const char* name;
  int64_t E, K, Is;
  bool norm_topk, qk_norm, bias;
  Routing routing = Routing::SoftmaxTopK;
  int64_t groups = 1, topk_groups = 1;
  double scaling = 1;
  bool shared_gate = true, router_bias = false, score_bias = false;
  bool gpt_oss = false;  // the rest of gpt-oss's block: sinks, a 3-key window, o bias, expert biases, clamped gate
};

template <class V>
using Named = std::map<std::string, std::vector<V>>;

template <class P, class V>
BlockPtrs<P> ptrs(Named<V>& m, int64_t E) {
  BlockPtrs<P> p;
  auto get = [&](const std::string& k) -> P { auto it = m.find(k); return it == m.end() ? nullptr : it->second.data(); };
  p.ln1 = get("ln1"); p.wq = get("wq"); p.wk = get("wk"); p.wv = get("wv"); p.bq = get("bq"); p.bk = get("bk");
  p.bv = get("bv"); p.q_norm = get("q_norm"); p.k_norm = get("k_norm"); p.wo = get("wo"); p.ln2 = get("ln2");
  p.bo = get("bo"); p.sinks = get("sinks");
  p.router = get("router"); p.router_bias = get("router_bias"); p.score_bias = get("score_bias"); p.sg = get("sg"); p.su = get("su"); p.sd = get("sd"); p.sgate = get("sgate");
  for (int64_t e = 0; e < E; ++e) {
    p.eg.push_back(get("eg" + std::to_string(e)));
    p.eu.push_back(get("eu" + std::to_string(e)));
    p.ed.push_back(get("ed" + std::to_string(e)));
    if (!m.count("ebg" + std::to_string(e))) continue;
    p.ebg.push_back(get("ebg" + std::to_string(e)));
    p.ebu.push_back(get("ebu" + std::to_string(e)));
    p.ebd.push_back(get("ebd" + std::to_string(e)));
  }
  return p;
}

struct MoeCase {
  BlockDims d;
  int64_t B = 2, T = 5;
  Named<double> w;
  std::vector<double> x, R, cs, sn;
  std::vector<int32_t> pos;

  explicit MoeCase(const Variant& v, int64_t width = 12, int64_t expert_width = 10, int64_t tokens = 5,
                   int64_t batch = 2)
      : B(batch), T(tokens) {
    d.C = width; d.I = 0; d.H = 4; d.Hkv = 2; d.D = 6; d.eps = 1e-5; d.qk_norm = v.qk_norm;
    d.moe = {v.E, v.K, expert_width, v.Is, v.norm_topk, v.routing, v.groups, v.topk_groups, v.scaling, v.shared_gate};
    const int64_t QD = d.H * d.D, KD = d.Hkv * d.D, C = d.C, I = d.moe.I;
    uint32_t seed = 300;
    auto add = [&](const std::string& k, int64_t n, double scale, double mean = 0) {
      auto r = randn<double>(size_t(n), seed++, scale);
      for (auto& e : r) e += mean;
      w[k] = r;
    };
    add("ln1", C, 0.2, 1.0); add("ln2", C, 0.2, 1.0);
    add("wq", QD * C, 0.4); add("wk", KD * C, 0.4); add("wv", KD * C, 0.4); add("wo", C * QD, 0.3);
    if (v.bias) { add("bq", QD, 0.2); add("bk", KD, 0.2); add("bv", KD, 0.2); }
    if (v.qk_norm) { add("q_norm", d.D, 0.2, 1.0); add("k_norm", d.D, 0.2, 1.0); }
    add("router", v.E * C, 0.8);
    if (v.router_bias) add("router_bias", v.E, 0.5);
    if (v.score_bias) add("score_bias", v.E, 0.3);
    for (int64_t e = 0; e < v.E; ++e) {
      add("eg" + std::to_string(e), I * C, 0.4);
      add("eu" + std::to_string(e), I * C, 0.4);
      add("ed" + std::to_string(e), C * I, 0.3);
    }
    if (v.Is) { add("sg", v.Is * C, 0.4); add("su", v.Is * C, 0.4); add("sd", C * v.Is, 0.3); }
    if (v.gpt_oss) {
      d.window = 3;
      d.sinks = true;
      d.act = {GateKind::ClampedSwiglu, 1.702f, 0.8f};
      d.moe.expert_bias = true;
      add("sinks", d.H, 1.0);
      add("bo", C, 0.2);
      for (int64_t e = 0; e < v.E; ++e) {
        add("ebg" + std::to_string(e), I, 0.3);
        add("ebu" + std::to_string(e), I, 0.3);
        add("ebd" + std::to_string(e), C, 0.2);
      }
    }
    if (v.Is && v.shared_gate) add("sgate", C, 0.4);
    x = randn<double>(size_t(B * T * C), 7);
    R = randn<double>(x.size(), 8);
    rope_inputs(B, T, d.D, cs, sn, pos);
  }
  BlockAux<double> aux() const { return {B, T, pos.data(), cs.data(), sn.data(), nullptr}; }
  // Every input rounded to fp32 (so the fp32 block and the double one see identical data); the fp32 copies.
  struct Fp32 {
    Named<float> w;
    std::vector<float> x, R, cs, sn;
  };
  Fp32 round_to_fp32() {
    Fp32 f;
    for (auto& [k, v] : w) { f.w[k] = cast<float>(v); v = cast<double>(f.w[k]); }
    for (auto [dbl, flt] : {std::pair{&x, &f.x}, {&R, &f.R}, {&cs, &f.cs}, {&sn, &f.sn}}) {
      *flt = cast<float>(*dbl);
      *dbl = cast<double>(*flt);
    }
    return f;
  }
};

class MoeBlockTest : public ::testing::TestWithParam<Variant> {};

TEST_P(MoeBlockTest, ReferenceBackwardMatchesFiniteDifferences) {
  MoeCase s(GetParam());
  ref::RefOps<double> ops;
  BlockRunner<ref::RefOps<double>> run(ops, s.d);
  const auto aux = s.aux();
  const int64_t E = s.d.moe.E;
  std::vector<double> y(s.x.size());
  auto loss = [&] {
    BlockRunner<ref::RefOps<double>>::Cache c;
    run.forward(ptrs<const double*>(s.w, E), aux, s.x.data(), y.data(), c);
    return dot(y, s.R);
  };
  Named<double> grads;
  for (auto& [k, v] : s.w) grads[k].assign(v.size(), 0.0);
  std::vector<double> dx(s.x.size());
  BlockRunner<ref::RefOps<double>>::Cache c;
  run.forward(ptrs<const double*>(s.w, E), aux, s.x.data(), y.data(), c);
  run.backward(ptrs<const double*>(s.w, E), aux, c, s.R.data(), dx.data(), ptrs<double*>(grads, E));
  int used = 0;
  for (const auto& ex : c.moe.ex) used += !ex.slots.empty();
  EXPECT_GE(used, 3) << "the case should route to several experts";
  expect_grad_matches_fd("dx", s.x, dx, loss, 1e-6, 120);
  for (auto& [k, v] : s.w) expect_grad_matches_fd("d" + k, v, grads[k], loss, 1e-6, 60);
}

TEST_P(MoeBlockTest, CpuBlockMatchesReference) {
  MoeCase s(GetParam());
  const int64_t E = s.d.moe.E;
  auto [wf, xf, Rf, csf, snf] = s.round_to_fp32();

  ref::RefOps<double> rops;
  BlockRunner<ref::RefOps<double>> rrun(rops, s.d);
  std::vector<double> y(s.x.size()), dx(s.x.size());
  Named<double> g;
  for (auto& [k, w] : s.w) g[k].assign(w.size(), 0.0);
  BlockRunner<ref::RefOps<double>>::Cache rc;
  rrun.forward(ptrs<const double*>(s.w, E), s.aux(), s.x.data(), y.data(), rc);
  rrun.backward(ptrs<const double*>(s.w, E), s.aux(), rc, s.R.data(), dx.data(), ptrs<double*>(g, E));

  Context ctx(Device{}, 2);
  cpu::CpuOps cops{ctx};
  BlockRunner<cpu::CpuOps> crun(cops, s.d);
  BlockAux<float> caux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), nullptr};
  std::vector<float> yf(xf.size()), dxf(xf.size());
  Named<float> gf;
  for (auto& [k, w] : wf) gf[k].assign(w.size(), 0.f);
  BlockRunner<cpu::CpuOps>::Cache cc;
  crun.forward(ptrs<const float*>(wf, E), caux, xf.data(), yf.data(), cc);
  crun.backward(ptrs<const float*>(wf, E), caux, cc, Rf.data(), dxf.data(), ptrs<float*>(gf, E));
  EXPECT_EQ(cc.moe.idx, rc.moe.idx) << "routing";
  EXPECT_LT(rel_err(yf.data(), y.data(), y.size()), 1e-5) << "y";
  EXPECT_LT(rel_err(dxf.data(), dx.data(), dx.size()), 1e-5) << "dx";
  for (auto& [k, w] : g) {
    if (std::all_of(w.begin(), w.end(), [](double v) { return v == 0; })) {
      EXPECT_TRUE(std::all_of(gf[k].begin(), gf[k].end(), [](float v) { return v == 0; })) << "d" << k;
      continue;
    }
    EXPECT_LT(rel_err(gf[k].data(), w.data(), w.size()), 1e-5) << "d" << k;
  }

  // Written gradients (accumulate = false) equal accumulated ones into zeros, unrouted experts included.
  Named<float> gw;
  for (auto& [k, w] : wf) gw[k].assign(w.size(), 7.f);
  crun.backward(ptrs<const float*>(wf, E), caux, cc, Rf.data(), dxf.data(), ptrs<float*>(gw, E), false);
  for (const char* k : {"router", "eg0", "ed1"}) EXPECT_EQ(gw[k], gf[k]) << k;
}

// FP8_STATIC in a MoE block: the reference ops with the activation QDQ replaced by the surrogate whose
// exact gradients are the straight-through ones (test_block.cpp's, here per call of a forward: q, k, v,
// o, then each routed expert's gate, up and down in expert order, then the shared expert's), so dx, every
// dW and each dL/ds must match finite differences of the surrogate.
struct MoeSurrogateOps : ref::RefOps<double> {
  bool recording = true;
  size_t call = 0;
  std::vector<std::vector<double>> x0, q0;
  std::vector<double> eps, max_abs;
  Operand act_qdq_operand(const Operand& x, double s, int64_t n) {
    const size_t k = call++;
    if (recording) {
      if (x0.size() <= k) {
        x0.resize(k + 1); q0.resize(k + 1); eps.resize(k + 1); max_abs.resize(k + 1);
      }
      Operand q = ref::RefOps<double>::act_qdq_operand(x, s, n);
      x0[k].assign(x.x, x.x + n);
      q0[k].assign(q.x, q.x + n);
      max_abs[k] = 0;
      for (int64_t i = 0; i < n; ++i) max_abs[k] = std::max(max_abs[k], std::abs(x.x[i]));
      return q;
    }
    Buf y = alloc(n);
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x0[k][size_t(i)], u = xi / s;
      const bool pass = std::abs(u) < 448.0;
      const double r = pass ? double(e4m3_round(float(u))) - u : std::copysign(448.0, u);
      y[size_t(i)] = q0[k][size_t(i)] + (pass ? x.x[i] - xi : 0.0) + eps[k] * r;
    }
    Operand o;
    o.own = std::move(y);
    o.x = o.own.data();
    return o;
  }
};

// The linear_slot each activation QDQ call of a forward belongs to (MoeSurrogateOps' order).
template <class Cache>
std::vector<size_t> act_call_slots(const BlockDims& d, const Cache& c) {
  std::vector<size_t> slots = {0, 1, 2, 3};
  for (size_t e = 0; e < c.moe.ex.size(); ++e)
    if (c.moe.ex[e].rows() > 0)
      for (size_t j = 0; j < 3; ++j) slots.push_back(4 + 3 * e + j);
  if (d.moe.Is)
    for (size_t j = 0; j < 3; ++j) slots.push_back(4 + 3 * size_t(d.moe.E) + j);
  return slots;
}

size_t linear_slots(const BlockDims& d) { return 4 + 3 * size_t(d.moe.E) + (d.moe.Is ? 3 : 0); }

// Scales from a first pass's input maxima (scale 1 everywhere), some below them (clipping).
ActQdq<double> moe_clipping_scales(MoeCase& s, MoeSurrogateOps& ops, BlockRunner<MoeSurrogateOps>& run) {
  ActQdq<double> probe;
  probe.s.assign(linear_slots(s.d), 1.0);
  std::vector<double> y(s.x.size());
  BlockRunner<MoeSurrogateOps>::Cache c;
  ops.call = 0;
  run.forward(ptrs<const double*>(s.w, s.d.moe.E), s.aux(), s.x.data(), y.data(), c, nullptr, &probe);
  const std::vector<size_t> slots = act_call_slots(s.d, c);
  const double factor[6] = {0.7, 1.5, 0.6, 0.8, 1.2, 0.5};
  ActQdq<double> a;
  a.s.assign(linear_slots(s.d), 0.0);
  for (size_t k = 0; k < slots.size(); ++k) a.s[slots[k]] = factor[k % 6] * ops.max_abs[k] / 448.0;
  return a;
}

TEST_P(MoeBlockTest, ActivationQdqGradientsMatchTheirSurrogate) {
  MoeCase s(GetParam());
  const int64_t E = s.d.moe.E;
  MoeSurrogateOps ops;
  BlockRunner<MoeSurrogateOps> run(ops, s.d);
  const ActQdq<double> act = moe_clipping_scales(s, ops, run);
  std::vector<double> y(s.x.size()), dx(s.x.size());
  ops.call = 0;
  BlockRunner<MoeSurrogateOps>::Cache c;
  run.forward(ptrs<const double*>(s.w, E), s.aux(), s.x.data(), y.data(), c, nullptr, &act);
  const std::vector<size_t> slots = act_call_slots(s.d, c);
  ASSERT_EQ(ops.call, slots.size()) << "a quantized Linear did not read its activation QDQ";
  int clipped = 0;
  for (size_t k = 0; k < slots.size(); ++k)
    for (double v : ops.x0[k]) clipped += std::abs(v / act.s[slots[k]]) > 448.0;
  EXPECT_GT(clipped, 0) << "no element clipped: the clamp's mask goes untested";
  Named<double> grads;
  for (auto& [k, v] : s.w) grads[k].assign(v.size(), 0.0);
  std::vector<double> dscale(linear_slots(s.d), 0.0);
  run.backward(ptrs<const double*>(s.w, E), s.aux(), c, s.R.data(), dx.data(), ptrs<double*>(grads, E), true,
               dscale.data());
  ops.recording = false;
  auto loss = [&] {
    BlockRunner<MoeSurrogateOps>::Cache cc;
    ops.call = 0;
    run.forward(ptrs<const double*>(s.w, E), s.aux(), s.x.data(), y.data(), cc, nullptr, &act);
    return dot(y, s.R);
  };
  expect_grad_matches_fd("dx", s.x, dx, loss, 1e-6, 120);
  for (auto& [k, v] : s.w) expect_grad_matches_fd("d" + k, v, grads[k], loss, 1e-6, 60);
  for (size_t k = 0; k < slots.size(); ++k) {
    std::vector<double> e{0.0}, de{dscale[slots[k]]};
    auto loss_k = [&] {
      ops.eps[k] = e[0];
      const double l = loss();
      ops.eps[k] = 0;
      return l;
    };
    expect_grad_matches_fd("dscale[" + std::to_string(slots[k]) + "]", e, de, loss_k, 1e-6, 1);
  }
}

// The fp32 CPU block with activation QDQ against the double reference one (scales rounded to fp32):
// forward, input gradient, every weight gradient and dL/ds.
TEST_P(MoeBlockTest, CpuBlockWithActivationQdqMatchesReference) {
  MoeCase s(GetParam());
  const int64_t E = s.d.moe.E;
  auto [wf, xf, Rf, csf, snf] = s.round_to_fp32();
  MoeSurrogateOps probe_ops;
  BlockRunner<MoeSurrogateOps> probe(probe_ops, s.d);
  ActQdq<double> act = moe_clipping_scales(s, probe_ops, probe);
  ActQdq<float> actf;
  for (double& v : act.s) {
    actf.s.push_back(float(v));
    v = actf.s.back();
  }
  ref::RefOps<double> rops;
  BlockRunner<ref::RefOps<double>> rrun(rops, s.d);
  std::vector<double> y(s.x.size()), dx(s.x.size()), ds(act.s.size(), 0.0);
  Named<double> g;
  for (auto& [k, w] : s.w) g[k].assign(w.size(), 0.0);
  BlockRunner<ref::RefOps<double>>::Cache rc;
  rrun.forward(ptrs<const double*>(s.w, E), s.aux(), s.x.data(), y.data(), rc, nullptr, &act);
  rrun.backward(ptrs<const double*>(s.w, E), s.aux(), rc, s.R.data(), dx.data(), ptrs<double*>(g, E), true, ds.data());

  Context ctx(Device{}, 2);
  cpu::CpuOps cops{ctx};
  cops.keep_fp32 = true;  // as the tuner sets it for FP8_STATIC
  BlockRunner<cpu::CpuOps> crun(cops, s.d);
  BlockAux<float> caux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), nullptr};
  std::vector<float> yf(xf.size()), dxf(xf.size()), dsf(act.s.size(), 0.f);
  Named<float> gf;
  for (auto& [k, w] : wf) gf[k].assign(w.size(), 0.f);
  BlockRunner<cpu::CpuOps>::Cache cc;
  crun.forward(ptrs<const float*>(wf, E), caux, xf.data(), yf.data(), cc, nullptr, &actf);
  crun.backward(ptrs<const float*>(wf, E), caux, cc, Rf.data(), dxf.data(), ptrs<float*>(gf, E), true, dsf.data());
  EXPECT_EQ(cc.moe.idx, rc.moe.idx) << "routing";
  EXPECT_LT(rel_err(yf.data(), y.data(), y.size()), 1e-5) << "y";
  EXPECT_LT(rel_err(dxf.data(), dx.data(), dx.size()), 1e-5) << "dx";
  for (auto& [k, w] : g) {
    if (std::all_of(w.begin(), w.end(), [](double v) { return v == 0; })) continue;
    EXPECT_LT(rel_err(gf[k].data(), w.data(), w.size()), 1e-5) << "d" << k;
  }
  // dL/ds sums dq (e4m3(u) - u) over a Linear's inputs: where the fp32 and double inputs round to
  // different E4M3 values (GEMM kernels differ in summation order), one slot moves by up to 1.5e-4 of
  // itself (measured over OpenBLAS's Nehalem/Haswell/SkylakeX kernels); all slots together by < 6e-7.
  EXPECT_LT(rel_err(dsf.data(), ds.data(), ds.size()), 1e-5) << "dscale";
  for (size_t k = 0; k < ds.size(); ++k) EXPECT_NEAR(dsf[k], ds[k], 1e-3 * std::abs(ds[k])) << "dscale[" << k << "]";
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeBlockTest,
                         ::testing::Values(Variant{"qwen3_moe", 8, 3, 0, true, true, false},
                                           Variant{"qwen2_moe", 6, 2, 8, false, false, true},
                                           Variant{"mixtral", 4, 2, 0, true, false, false},
                                           Variant{"deepseek_v3", 8, 2, 8, true, false, false, Routing::SigmoidGroups,
                                                   4, 2, 2.5, false, false, true},
                                           Variant{"sigmoid_plain", 6, 3, 0, false, false, false,
                                                   Routing::SigmoidGroups, 1, 1, 1.5, true, false, true},
                                           Variant{"gpt_oss", 4, 2, 0, false, false, true, Routing::TopKSoftmax, 1,
                                                   1, 1, true, true, false, true}),
                         [](const auto& p) { return std::string(p.param.name); });

// Equal router logits: the lower expert index wins, and the weights split evenly.
TEST(MoeRouting, TiesGoToTheLowerExpertIndex) {
  MoeCase s(Variant{"ties", 4, 2, 0, true, false, false});
  std::fill(s.w["router"].begin(), s.w["router"].end(), 0.0);  // every logit 0: a four-way tie
  ref::RefOps<double> ops;
  BlockRunner<ref::RefOps<double>> run(ops, s.d);
  std::vector<double> y(s.x.size());
  BlockRunner<ref::RefOps<double>>::Cache c;
  run.forward(ptrs<const double*>(s.w, 4), s.aux(), s.x.data(), y.data(), c);
  for (int64_t n = 0; n < s.B * s.T; ++n) {
    EXPECT_EQ(c.moe.idx[size_t(2 * n)], 0);
    EXPECT_EQ(c.moe.idx[size_t(2 * n + 1)], 1);
    EXPECT_EQ(c.moe.wt[size_t(2 * n)], 0.5);
  }
  EXPECT_TRUE(c.moe.ex[2].slots.empty());
  EXPECT_TRUE(c.moe.ex[3].slots.empty());
}

// Experts no token reaches are skipped: the output equals that of the block without them (their
// weights cannot matter), and their accumulated gradients stay zero.
TEST(MoeRouting, ExpertsWithoutTokensAreSkipped) {
  MoeCase s(Variant{"skip", 4, 1, 0, false, false, false});
  auto& r = s.w["router"];  // experts 2 and 3 copy the rows of 0 and 1, so they lose every tie
  std::copy(r.begin(), r.begin() + 2 * s.d.C, r.begin() + 2 * s.d.C);
  ref::RefOps<double> ops;
  BlockRunner<ref::RefOps<double>> run(ops, s.d);
  std::vector<double> y(s.x.size()), y2(s.x.size()), dx(s.x.size());
  BlockRunner<ref::RefOps<double>>::Cache c;
  run.forward(ptrs<const double*>(s.w, 4), s.aux(), s.x.data(), y.data(), c);
  ASSERT_TRUE(c.moe.ex[2].slots.empty());
  ASSERT_TRUE(c.moe.ex[3].slots.empty());
  Named<double> g;
  for (auto& [k, w] : s.w) g[k].assign(w.size(), 0.0);
  run.backward(ptrs<const double*>(s.w, 4), s.aux(), c, s.R.data(), dx.data(), ptrs<double*>(g, 4));
  for (const char* k : {"eg2", "eu2", "ed2", "eg3", "eu3", "ed3"})
    EXPECT_TRUE(std::all_of(g[k].begin(), g[k].end(), [](double v) { return v == 0; })) << k;
  for (auto& v : s.w["ed3"]) v = 1e3;  // an unrouted expert's weights do not reach the output
  BlockRunner<ref::RefOps<double>>::Cache c2;
  run.forward(ptrs<const double*>(s.w, 4), s.aux(), s.x.data(), y2.data(), c2);
  EXPECT_EQ(y, y2);
}

}  // namespace

namespace {
// The tuning's gradient tree adds other leaves' sums inside a weight gradient's GEMM (cpu::GradAddends);
// an expert that this leaf routes no token to must still get them, or the tree drops those leaves'
// share of its gradient.
TEST(MoeRouting, ExpertsWithoutTokensStillTakeTheirGradientAddends) {
  MoeCase s(Variant{"addends", 4, 1, 0, false, false, false});
  auto& r = s.w["router"];  // expert 3 copies expert 0's row: it never wins
  std::copy(r.begin(), r.begin() + s.d.C, r.begin() + 3 * s.d.C);
  Named<float> wf, gf;
  for (auto& [k, w] : s.w) { wf[k] = cast<float>(w); gf[k].assign(w.size(), 5.f); }
  auto xf = cast<float>(s.x), Rf = cast<float>(s.R), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  Context ctx(Device{}, 2);
  cpu::GradAddends add;
  const std::vector<float> a1(gf["eg3"].size(), 0.25f), a2(gf["eg3"].size(), 0.5f);
  add.set(gf["eg3"].data(), {a1.data(), a2.data()});
  add.set(gf["eg1"].data(), {a1.data()});
  cpu::CpuOps ops{ctx, nullptr, &add};
  BlockRunner<cpu::CpuOps> run(ops, s.d);
  BlockAux<float> aux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), nullptr};
  std::vector<float> y(xf.size()), dx(xf.size());
  BlockRunner<cpu::CpuOps>::Cache c;
  run.forward(ptrs<const float*>(wf, 4), aux, xf.data(), y.data(), c);
  ASSERT_TRUE(c.moe.ex[3].slots.empty());
  ASSERT_FALSE(c.moe.ex[1].slots.empty());
  auto keep = gf["eg1"];
  run.backward(ptrs<const float*>(wf, 4), aux, c, Rf.data(), dx.data(), ptrs<float*>(gf, 4), false);
  for (float v : gf["eg3"]) ASSERT_EQ(v, 0.75f);  // written: 0 + 0.25 + 0.5
  for (float v : gf["eu3"]) ASSERT_EQ(v, 0.f);
  Named<float> plain;
  for (auto& [k, w] : s.w) plain[k].assign(w.size(), 0.f);
  cpu::CpuOps ops2{ctx};
  BlockRunner<cpu::CpuOps> run2(ops2, s.d);
  BlockRunner<cpu::CpuOps>::Cache c2;
  run2.forward(ptrs<const float*>(wf, 4), aux, xf.data(), y.data(), c2);
  run2.backward(ptrs<const float*>(wf, 4), aux, c2, Rf.data(), dx.data(), ptrs<float*>(plain, 4), false);
  for (size_t i = 0; i < keep.size(); ++i) ASSERT_EQ(gf["eg1"][i], plain["eg1"][i] + 0.25f) << i;
}
}  // namespace

namespace {
// The experts run grouped on the pool (cpu::CpuOps::for_each_group: each thread a run of experts on
// serial kernels). Block output, input gradient and every Linear's gradient, with tree addends, are the
// bits of a one-thread context, for pools that split the experts differently; in fp32 and under amp (bf16
// operands, where the CPU has bf16 GEMMs). Widths where the expert GEMMs are cut into several units and
// reach oneDNN's path where the CPU has one.
void expect_grouped_bits_of_one_thread(bool amp) {
  MoeCase s(Variant{"grouped", 8, 2, 64, true, true, false}, 512, 384, 128);
  Named<float> wf;
  for (auto& [k, w] : s.w) wf[k] = cast<float>(w);
  auto xf = cast<float>(s.x), Rf = cast<float>(s.R), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  BlockAux<float> aux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), nullptr};
  const std::vector<float> a1(wf["eg5"].size(), 0.25f);
  struct Out {
    std::vector<float> y, dx;
    Named<float> g;
    std::vector<int64_t> rows;
  };
  const cpu::Bf16Operands rounded_per_call;  // amp: every weight rounded to bf16 at each GEMM
  auto run = [&](int threads) {
    Context ctx(Device{}, threads);
    cpu::GradAddends add;
    Out o;
    for (auto& [k, w] : s.w) o.g[k].assign(w.size(), 0.f);
    add.set(o.g["eg5"].data(), {a1.data()});
    cpu::CpuOps ops{ctx, amp ? &rounded_per_call : nullptr, &add};
    BlockRunner<cpu::CpuOps> r(ops, s.d);
    BlockRunner<cpu::CpuOps>::Cache c;
    o.y.resize(xf.size());
    o.dx.resize(xf.size());
    r.forward(ptrs<const float*>(wf, 8), aux, xf.data(), o.y.data(), c);
    for (const auto& e : c.moe.ex) o.rows.push_back(e.rows());
    r.backward(ptrs<const float*>(wf, 8), aux, c, Rf.data(), o.dx.data(), ptrs<float*>(o.g, 8), false);
    return o;
  };
  const Out one = run(1);
  int busy = 0;
  for (int64_t r : one.rows) busy += r > 0;
  ASSERT_GE(busy, 6);  // the routing spreads: most experts get rows
  for (int threads : {2, 3}) {
    const Out o = run(threads);
    EXPECT_EQ(o.rows, one.rows);
    EXPECT_EQ(o.y, one.y) << threads;
    EXPECT_EQ(o.dx, one.dx) << threads;
    for (auto& [k, g] : one.g) {  // norm weights (never tuned) reduce per-thread partial sums (rmsnorm.cpp)
      if (k == "ln1" || k == "ln2" || k == "q_norm" || k == "k_norm") continue;
      EXPECT_EQ(o.g.at(k), g) << k << ", " << threads << " threads";
    }
  }
}

TEST(MoeRouting, GroupedExpertsGiveTheBitsOfOneThread) { expect_grouped_bits_of_one_thread(false); }

TEST(MoeRouting, GroupedExpertsGiveTheBitsOfOneThreadUnderAmp) {
  if (!cpu::bf16_gemm_supported()) GTEST_SKIP() << "no bf16 GEMMs here: " << cpu::bf16_support_summary();
  expect_grouped_bits_of_one_thread(true);
}
}  // namespace

namespace {
// The tuning tree's deferred experts (quant/expert_grad_tree.h): each leaf's block backward hands its
// expert products to a cpu::DeferredGrads (writing none of the experts' gradients) and the per-expert
// tree afterwards gives, bit for bit, the tree of the products the leaves compute themselves:
// S(a, b) = S(mid, b) + S(a, mid) in fp32, a pair P_a + P_(a+1). Five one-sample leaves (an odd split
// and pending sums), experts that some leaves route no row to, on two threads (grouped experts).
// `stacked`: every run's experts on row-independent GEMMs (CpuOps::expert_row_gemms, as the tuner's
// deterministic runs), so the experts-outermost pass stacks the leaves' rows of each expert into one
// GEMM; wider shapes then, where oneDNN's rows would depend on the call's other rows.
void expect_deferred_tree_of_immediate_leaves(bool amp, bool stacked = false) {
  const int64_t L = 5, E = 8;
  MoeCase s(Variant{"tree", E, 2, 0, true, true, false}, stacked ? 128 : 64, stacked ? 96 : 48, stacked ? 24 : 6, L);
  Named<float> wf;
  for (auto& [k, w] : s.w) wf[k] = cast<float>(w);
  auto xf = cast<float>(s.x), Rf = cast<float>(s.R), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  const int64_t C = s.d.C, T = s.T;
  Context ctx(Device{}, 2);
  const cpu::Bf16Operands rounded_per_call;
  const cpu::Bf16Operands* bf = amp ? &rounded_per_call : nullptr;
  BlockAux<float> aux{1, T, s.pos.data(), csf.data(), snf.data(), nullptr};
  std::vector<Named<float>> P(L);  // the leaves' own gradients
  cpu::DeferredGrads dg;
  Named<float> marks;  // the expert gradients the deferring backward is given: must stay untouched
  for (auto& [k, w] : s.w) marks[k].assign(w.size(), -7.f);
  int empty_pairs = 0;
  std::vector<std::vector<float>> y_own(static_cast<size_t>(L)), dx_own(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    std::vector<float> y(size_t(T * C)), dx(size_t(T * C)), dx2(size_t(T * C));
    const float* xl = xf.data() + l * T * C;
    const float* rl = Rf.data() + l * T * C;
    for (auto& [k, w] : s.w) P[size_t(l)][k].assign(w.size(), 0.f);
    cpu::CpuOps now{ctx, bf};
    now.expert_row_gemms = stacked;
    BlockRunner<cpu::CpuOps> r1(now, s.d);
    BlockRunner<cpu::CpuOps>::Cache c1;
    r1.forward(ptrs<const float*>(wf, E), aux, xl, y.data(), c1);
    for (const auto& e : c1.moe.ex) empty_pairs += e.slots.empty();
    r1.backward(ptrs<const float*>(wf, E), aux, c1, rl, dx.data(), ptrs<float*>(P[size_t(l)], E), false);
    cpu::CpuOps later{ctx, bf, nullptr, &dg};
    later.expert_row_gemms = stacked;
    BlockRunner<cpu::CpuOps> r2(later, s.d);
    BlockRunner<cpu::CpuOps>::Cache c2;
    r2.forward(ptrs<const float*>(wf, E), aux, xl, y.data(), c2);
    dg.begin_leaf(3 * E);
    r2.backward(ptrs<const float*>(wf, E), aux, c2, rl, dx2.data(), ptrs<float*>(marks, E), false);
    ASSERT_EQ(dx2, dx) << "leaf " << l;
    y_own[size_t(l)] = y;
    dx_own[size_t(l)] = dx;
  }
  ASSERT_GT(empty_pairs, 0) << "no leaf left an expert without rows";
  // The same leaves with the experts outermost (the tuner's experts_outer): every leaf to its experts,
  // the experts over all leaves at once, the rest of each leaf; the products go to dg3 under their own
  // leaf, filled expert by expert. Outputs, input gradients and the other weights' gradients equal each
  // leaf's own run; the tree over dg3 is checked with dg's below.
  cpu::DeferredGrads dg3;
  {
    cpu::CpuOps later{ctx, bf, nullptr, &dg3};
    later.expert_row_gemms = stacked;
    ASSERT_EQ(later.experts_stack_rows(), stacked && cpu::CpuOps::has_row_gemms(amp));
    BlockRunner<cpu::CpuOps> r3(later, s.d);
    std::vector<BlockRunner<cpu::CpuOps>::Cache> c3(static_cast<size_t>(L));
    std::vector<MoeFfn<cpu::CpuOps>::Cache*> moe;
    std::vector<std::vector<float>> y3(static_cast<size_t>(L), std::vector<float>(size_t(T * C)));
    for (int64_t l = 0; l < L; ++l) {
      ASSERT_TRUE(r3.forward_to_experts(ptrs<const float*>(wf, E), aux, xf.data() + l * T * C, y3[size_t(l)].data(),
                                        c3[size_t(l)]));
      c3[size_t(l)].moe.leaf = l;
      moe.push_back(&c3[size_t(l)].moe);
    }
    r3.moe().run_experts(ptrs<const float*>(wf, E), moe);
    for (int64_t l = 0; l < L; ++l) {
      r3.forward_from_experts(ptrs<const float*>(wf, E), aux, y3[size_t(l)].data(), c3[size_t(l)]);
      ASSERT_EQ(y3[size_t(l)], y_own[size_t(l)]) << "leaf " << l;
      dg3.begin_leaf(3 * E);
      r3.backward_to_experts(aux, c3[size_t(l)], Rf.data() + l * T * C);
    }
    r3.moe().expert_grads(ptrs<const float*>(wf, E), moe, ptrs<float*>(marks, E), false, nullptr);
    for (int64_t l = L - 1; l >= 0; --l) {  // any order: each leaf writes its own gradients
      Named<float> g3;
      for (auto& [k, w] : s.w) g3[k].assign(w.size(), 0.f);
      for (int64_t e = 0; e < E; ++e)
        for (const char* k : {"eg", "eu", "ed"}) g3[k + std::to_string(e)] = marks[k + std::to_string(e)];
      std::vector<float> dx3(size_t(T * C));
      r3.backward_from_experts(ptrs<const float*>(wf, E), aux, c3[size_t(l)], Rf.data() + l * T * C, dx3.data(),
                               ptrs<float*>(g3, E), false);
      ASSERT_EQ(dx3, dx_own[size_t(l)]) << "leaf " << l;
      for (auto& [k, g] : g3) {
        const bool expert = k.rfind("eg", 0) == 0 || k.rfind("eu", 0) == 0 || k.rfind("ed", 0) == 0;
        if (!expert) {
          ASSERT_EQ(g, P[size_t(l)][k]) << k << " leaf " << l;
        }
      }
    }
  }
  for (int64_t e = 0; e < E; ++e)
    for (const char* k : {"eg", "eu", "ed"})
      for (float v : marks[k + std::to_string(e)]) ASSERT_EQ(v, -7.f) << "a deferred gradient was written";
  // The reference tree over the leaves' own products, in fp32.
  std::function<std::vector<float>(const std::string&, int64_t, int64_t)> S = [&](const std::string& k, int64_t a,
                                                                                   int64_t b) {
    if (b - a == 1) return P[size_t(a)][k];
    std::vector<float> lo = b - a == 2 ? P[size_t(a)][k] : S(k, a, (a + b) / 2);
    std::vector<float> hi = b - a == 2 ? P[size_t(a + 1)][k] : S(k, (a + b) / 2, b);
    for (size_t i = 0; i < hi.size(); ++i) hi[i] = hi[i] + lo[i];
    return hi;
  };
  Named<float> got;
  std::vector<quant::ExpertGradTarget> targets;
  const int64_t I = s.d.moe.I;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t kind = 0; kind < 3; ++kind) {
      const std::string k = std::string(kind == 0 ? "eg" : kind == 1 ? "eu" : "ed") + std::to_string(e);
      got[k].assign(s.w[k].size(), 123.f);
      targets.push_back({3 * e + kind, kind == 2 ? C : I, kind == 2 ? I : C, got[k].data()});
    }
  cpu::CpuOps ops{ctx, bf};
  ops.expert_row_gemms = stacked;  // as the tuner's ops (signround.cpp): the leaves' kernels sum the tree
  quant::expert_grad_tree(ops, dg, targets);
  for (auto& [k, g] : got) EXPECT_EQ(g, S(k, 0, L)) << k;
  for (auto& t : targets) std::fill(t.dst, t.dst + t.out * t.in, 123.f);
  quant::expert_grad_tree(ops, dg3, targets);
  for (auto& [k, g] : got) EXPECT_EQ(g, S(k, 0, L)) << k << " (experts outermost)";
}

TEST(MoeExpertTree, DeferredLeavesSumToTheTreeOfImmediateLeaves) { expect_deferred_tree_of_immediate_leaves(false); }

TEST(MoeExpertTree, DeferredLeavesSumToTheTreeOfImmediateLeavesUnderAmp) {
  if (!cpu::bf16_gemm_supported()) GTEST_SKIP() << "no bf16 GEMMs here: " << cpu::bf16_support_summary();
  expect_deferred_tree_of_immediate_leaves(true);
}

TEST(MoeExpertTree, StackedLeavesGiveTheBitsOfEachLeafsOwnRun) { expect_deferred_tree_of_immediate_leaves(false, true); }

TEST(MoeExpertTree, StackedLeavesGiveTheBitsOfEachLeafsOwnRunUnderAmp) {
  if (!cpu::CpuOps::has_row_gemms(true) || !cpu::bf16_gemm_supported())
    GTEST_SKIP() << "no row-independent bf16 GEMMs at this level (" << cpu::isa_name(cpu::kernel_isa()) << ")";
  expect_deferred_tree_of_immediate_leaves(true, true);
}
}  // namespace

namespace {
// The tree's steps (quant::leaf_tree_steps), written out: what both the per-leaf GEMMs and the one-pass
// kernel (cpu::weight_grad_tree_bf16) run. Buffer 0 is the root; a left half's sum waits in a free
// buffer (0 too, before the root is written) and is added by the right half's last leaf.
TEST(MoeExpertTree, LeafTreeStepsAreTheTunersTree) {
  using S = cpu::GradTreeStep;
  auto same = [](const std::vector<S>& a, const std::vector<S>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].dst != b[i].dst || a[i].accumulate != b[i].accumulate || a[i].adds != b[i].adds) return false;
    return true;
  };
  EXPECT_TRUE(quant::leaf_tree_steps(0).empty());
  EXPECT_TRUE(same(quant::leaf_tree_steps(1), {S{0, false, {}}}));
  EXPECT_TRUE(same(quant::leaf_tree_steps(2), {S{0, false, {}}, S{0, true, {}}}));
  EXPECT_TRUE(same(quant::leaf_tree_steps(5),
                   {S{1, false, {}}, S{1, true, {}}, S{2, false, {}}, S{0, false, {}}, S{0, true, {2, 1}}}));
  EXPECT_TRUE(same(quant::leaf_tree_steps(8), {S{0, false, {}}, S{0, true, {}}, S{1, false, {}}, S{1, true, {0}},
                                               S{2, false, {}}, S{2, true, {}}, S{0, false, {}},
                                               S{0, true, {2, 1}}}));
}
}  // namespace

namespace {
double logit(double s) { return std::log(s / (1 - s)); }

// DeepSeek-V3's router: only the best topk_groups groups (by the sum of their two best choice scores)
// compete, so the single best expert can lose; the correction bias moves the choice, not the weights.
TEST(MoeRouting, SigmoidGroupsPickWithinTheBestGroups) {
  MoeDims m;
  m.E = 8; m.K = 2; m.norm_topk = true; m.routing = Routing::SigmoidGroups; m.groups = 4; m.topk_groups = 2;
  m.scaling = 2.5;
  const double s[8] = {0.9, 0.1, 0.6, 0.6, 0.5, 0.55, 0.2, 0.3};  // group sums 1.0, 1.2, 1.05, 0.5
  std::vector<double> pr(8);
  int32_t idx[2];
  double wt[2];
  MoeRouter<double> router(m);
  for (int e = 0; e < 8; ++e) pr[size_t(e)] = logit(s[e]);
  router.route(pr.data(), nullptr, idx, wt);
  EXPECT_EQ(idx[0], 2);  // groups 1 and 2 win; expert 0 (0.9) is out; 2 and 3 tie, the lower first
  EXPECT_EQ(idx[1], 3);
  EXPECT_NEAR(wt[0], 0.5 * 2.5, 1e-12);
  const double bias[8] = {0, 0, 0, 0, 0.2, 0, 0, 0};  // expert 4's choice score 0.7: group 2 first
  for (int e = 0; e < 8; ++e) pr[size_t(e)] = logit(s[e]);
  router.route(pr.data(), bias, idx, wt);
  EXPECT_EQ(idx[0], 4);
  EXPECT_EQ(idx[1], 2);
  EXPECT_NEAR(wt[0], 0.5 / 1.1 * 2.5, 1e-12);  // the weights are the sigmoid scores, not the biased ones
  EXPECT_NEAR(wt[1], 0.6 / 1.1 * 2.5, 1e-12);
}

// gpt-oss's router: the top-K logits, then a softmax over them alone; ties to the lower index.
TEST(MoeRouting, TopKThenSoftmax) {
  MoeDims m;
  m.E = 4; m.K = 2; m.routing = Routing::TopKSoftmax;
  std::vector<double> pr = {1, 3, 2, 3};
  int32_t idx[2];
  double wt[2];
  MoeRouter<double>(m).route(pr.data(), nullptr, idx, wt);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 3);
  EXPECT_EQ(wt[0], 0.5);
  pr = {0, 1, 2, -1};
  MoeRouter<double>(m).route(pr.data(), nullptr, idx, wt);
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(wt[0], 1 / (1 + std::exp(-1.0)), 1e-15);
}
}  // namespace
