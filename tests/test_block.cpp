// Whole decoder block: reference backward (double) vs central finite differences for the input and
// every weight, and the fp32 CPU block vs the double reference block (forward and all gradients).
// Variants: plain Llama, Qwen2-style q/k/v bias (+ o bias as Llama attention_bias), Qwen3 q/k norm,
// padding mask.
#include <map>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "model/block_impl.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {

struct Variant {
  const char* name;
  bool bias, qk_norm, mask;
};

struct Weights {
  std::map<std::string, std::vector<double>> t;
  template <class P, class V>
  static BlockPtrs<P> ptrs(std::map<std::string, V>& m) {
    BlockPtrs<P> p;
    auto get = [&](const char* k) -> P { auto it = m.find(k); return it == m.end() ? nullptr : it->second.data(); };
    p.ln1 = get("ln1"); p.wq = get("wq"); p.wk = get("wk"); p.wv = get("wv"); p.bq = get("bq"); p.bk = get("bk");
    p.bv = get("bv"); p.q_norm = get("q_norm"); p.k_norm = get("k_norm"); p.wo = get("wo"); p.bo = get("bo");
    p.ln2 = get("ln2"); p.wg = get("wg"); p.wu = get("wu"); p.wd = get("wd");
    return p;
  }
};

struct BlockCase {
  BlockDims d;
  int64_t B = 2, T = 5;
  Weights w;
  std::vector<double> x, R, cs, sn;
  std::vector<int32_t> pos;
  std::vector<uint8_t> mask;
  bool masked;

  explicit BlockCase(const Variant& v) : masked(v.mask) {
    d.C = 12; d.I = 20; d.H = 4; d.Hkv = 2; d.D = 6; d.eps = 1e-5; d.qk_norm = v.qk_norm;
    const int64_t QD = d.H * d.D, KD = d.Hkv * d.D;
    uint32_t seed = 100;
    auto add = [&](const char* k, int64_t n, double scale, double mean = 0) {
      auto r = randn<double>(size_t(n), seed++, scale);
      for (auto& e : r) e += mean;
      w.t[k] = r;
    };
    add("ln1", d.C, 0.2, 1.0); add("ln2", d.C, 0.2, 1.0);
    add("wq", QD * d.C, 0.4); add("wk", KD * d.C, 0.4); add("wv", KD * d.C, 0.4); add("wo", d.C * QD, 0.3);
    add("wg", d.I * d.C, 0.4); add("wu", d.I * d.C, 0.4); add("wd", d.C * d.I, 0.3);
    if (v.bias) { add("bq", QD, 0.2); add("bk", KD, 0.2); add("bv", KD, 0.2); add("bo", d.C, 0.2); }
    if (v.qk_norm) { add("q_norm", d.D, 0.2, 1.0); add("k_norm", d.D, 0.2, 1.0); }
    x = randn<double>(size_t(B * T * d.C), 7);
    R = randn<double>(x.size(), 8);
    for (int64_t p = 0; p < T; ++p)
      for (int64_t i = 0; i < d.D / 2; ++i) {
        double a = p * std::pow(10000.0, -2.0 * i / d.D);
        cs.push_back(std::cos(a));
        sn.push_back(std::sin(a));
      }
    for (int64_t i = 0; i < B * T; ++i) pos.push_back(int32_t(i % T));
    mask.assign(size_t(B * T), 1);
    if (masked) { mask[size_t(T)] = 0; mask[size_t(T + 3)] = 0; }
  }
  const uint8_t* key_mask() const { return masked ? mask.data() : nullptr; }
};

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

TEST_P(BlockTest, CpuBlockMatchesReference) {
  BlockCase s(GetParam());
  // Round every input to fp32 first so both paths see identical data.
  std::map<std::string, std::vector<float>> wf;
  for (auto& [k, v] : s.w.t) { wf[k] = cast<float>(v); v = cast<double>(wf[k]); }
  auto xf = cast<float>(s.x), Rf = cast<float>(s.R), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  s.x = cast<double>(xf); s.R = cast<double>(Rf); s.cs = cast<double>(csf); s.sn = cast<double>(snf);

  ref::RefOps<double> rops;
  BlockRunner<ref::RefOps<double>> rrun(rops, s.d);
  BlockAux<double> raux{s.B, s.T, s.pos.data(), s.cs.data(), s.sn.data(), s.key_mask()};
  std::vector<double> y(s.x.size()), dx(s.x.size());
  std::map<std::string, std::vector<double>> g;
  for (auto& [k, v] : s.w.t) g[k].assign(v.size(), 0.0);
  BlockRunner<ref::RefOps<double>>::Cache rc;
  rrun.forward(Weights::ptrs<const double*>(s.w.t), raux, s.x.data(), y.data(), rc);
  rrun.backward(Weights::ptrs<const double*>(s.w.t), raux, rc, s.R.data(), dx.data(), Weights::ptrs<double*>(g));

  Context ctx(Device{}, 2);
  cpu::CpuOps cops{ctx};
  BlockRunner<cpu::CpuOps> crun(cops, s.d);
  BlockAux<float> caux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), s.key_mask()};
  std::vector<float> yf(xf.size()), dxf(xf.size());
  std::map<std::string, std::vector<float>> gf;
  for (auto& [k, v] : wf) gf[k].assign(v.size(), 0.f);
  BlockRunner<cpu::CpuOps>::Cache cc;
  crun.forward(Weights::ptrs<const float*>(wf), caux, xf.data(), yf.data(), cc);
  crun.backward(Weights::ptrs<const float*>(wf), caux, cc, Rf.data(), dxf.data(), Weights::ptrs<float*>(gf));

  EXPECT_LT(rel_err(yf.data(), y.data(), y.size()), 1e-5) << "y";
  EXPECT_LT(rel_err(dxf.data(), dx.data(), dx.size()), 1e-5) << "dx";
  for (auto& [k, v] : g) EXPECT_LT(rel_err(gf[k].data(), v.data(), v.size()), 1e-5) << "d" << k;

  // Without dx (what tuning asks for), the weight gradients are the same bits; ln1 gets none.
  std::map<std::string, std::vector<float>> gn;
  for (auto& [k, v] : wf) gn[k].assign(v.size(), 0.f);
  auto gp = Weights::ptrs<float*>(gn);
  gp.ln1 = nullptr;
  crun.backward(Weights::ptrs<const float*>(wf), caux, cc, Rf.data(), nullptr, gp);
  for (auto& [k, v] : gn) {
    if (k != "ln1") {
      EXPECT_TRUE(v == gf[k]) << "d" << k << " differs without dx";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, BlockTest,
                         ::testing::Values(Variant{"llama", false, false, false}, Variant{"bias", true, false, false},
                                           Variant{"qwen3", false, true, false}, Variant{"masked", true, true, true}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
