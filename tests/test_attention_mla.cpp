// Multi-head latent attention (model/attention_mla.h) inside the decoder block: the double block against a
// direct double transcription of transformers' DeepseekV3Attention (de-interleaved RoPE output, explicit
// heads, no op table), the reference backward against central finite differences for the input and every
// weight, the fp32 CPU block against the double one, and incremental decoding against the full forward.
// Variants: with q_lora and interleaved RoPE (DeepSeek-V3, Kimi K2), without q_lora and rotate_half pairs
// (DeepSeek-V2-Lite's q_proj), a key padding mask, an explicit softmax scale (YaRN's mscale) and an o bias.
#include <cmath>
#include <map>

#include "block_case.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "model/block_impl.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {

struct MlaVariant {
  const char* name;
  int64_t q_lora;
  bool interleave, mask, o_bias;
  double scale;
};
void PrintTo(const MlaVariant& v, std::ostream* os) { *os << v.name; }

template <class V>
using Named = std::map<std::string, std::vector<V>>;

template <class P, class V>
BlockPtrs<P> mla_ptrs(Named<V>& m) {
  BlockPtrs<P> p;
  auto get = [&](const char* k) -> P { auto it = m.find(k); return it == m.end() ? nullptr : it->second.data(); };
  p.ln1 = get("ln1"); p.ln2 = get("ln2"); p.wq = get("wq"); p.wo = get("wo"); p.bo = get("bo");
  p.q_a = get("q_a"); p.q_a_norm = get("q_a_norm"); p.q_b = get("q_b");
  p.kv_a = get("kv_a"); p.kv_a_norm = get("kv_a_norm"); p.kv_b = get("kv_b");
  p.wg = get("wg"); p.wu = get("wu"); p.wd = get("wd");
  return p;
}

struct MlaCase {
  BlockDims d;
  int64_t B = 2, T = 5;
  Named<double> w;
  std::vector<double> x, R, cs, sn;
  std::vector<int32_t> pos;
  std::vector<uint8_t> mask;
  bool masked;

  explicit MlaCase(const MlaVariant& v, int64_t batch = 2) : B(batch), masked(v.mask) {
    d.C = 16; d.I = 12; d.H = 3; d.Hkv = 3; d.eps = 1e-5;
    d.attn = AttnKind::Mla;
    d.mla = {v.q_lora, 5, 4, 4, 3, v.interleave, v.scale};
    d.D = d.mla.nope + d.mla.rope;
    const int64_t C = d.C, H = d.H, Dq = d.D, L = d.mla.kv_lora, Rr = d.mla.rope;
    uint32_t seed = 700;
    auto add = [&](const char* k, int64_t n, double scale, double mean = 0) {
      auto r = randn<double>(size_t(n), seed++, scale);
      for (auto& e : r) e += mean;
      w[k] = r;
    };
    add("ln1", C, 0.2, 1.0); add("ln2", C, 0.2, 1.0);
    if (v.q_lora) {
      add("q_a", v.q_lora * C, 0.4); add("q_a_norm", v.q_lora, 0.2, 1.0); add("q_b", H * Dq * v.q_lora, 0.4);
    } else {
      add("wq", H * Dq * C, 0.4);
    }
    add("kv_a", (L + Rr) * C, 0.4); add("kv_a_norm", L, 0.2, 1.0);
    add("kv_b", H * (d.mla.nope + d.mla.v) * L, 0.4);
    add("wo", C * H * d.mla.v, 0.3);
    if (v.o_bias) add("bo", C, 0.2);
    add("wg", d.I * C, 0.4); add("wu", d.I * C, 0.4); add("wd", C * d.I, 0.3);
    x = randn<double>(size_t(B * T * C), 7);
    R = randn<double>(x.size(), 8);
    rope_inputs(B, T, Rr, cs, sn, pos);
    mask.assign(size_t(B * T), 1);
    if (masked) { mask[size_t(T)] = 0; mask[size_t(T + 3)] = 0; }
  }
  const uint8_t* key_mask() const { return masked ? mask.data() : nullptr; }
  BlockAux<double> aux() const { return {B, T, pos.data(), cs.data(), sn.data(), key_mask()}; }
};

// y = x W^T for row-major x [n, in], W [out, in].
std::vector<double> matmul_t(const std::vector<double>& x, const std::vector<double>& W, int64_t n, int64_t in,
                             int64_t out) {
  std::vector<double> y(size_t(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[size_t(r * out + o)] += x[size_t(r * in + i)] * W[size_t(o * in + i)];
  return y;
}
std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& g, int64_t n, int64_t dim,
                            double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[size_t(r * dim + i)] * x[size_t(r * dim + i)];
    const double k = 1 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[size_t(r * dim + i)] = x[size_t(r * dim + i)] * k * g[size_t(i)];
  }
  return y;
}
// transformers' RoPE of one rope part: interleaved pairs come out de-interleaved (evens, then odds).
std::vector<double> hf_rope(const double* x, int64_t R, int64_t p, bool interleave) {
  std::vector<double> a(static_cast<size_t>(R / 2)), b(static_cast<size_t>(R / 2)), y(static_cast<size_t>(R));
  for (int64_t i = 0; i < R / 2; ++i) {
    a[size_t(i)] = interleave ? x[2 * i] : x[i];
    b[size_t(i)] = interleave ? x[2 * i + 1] : x[i + R / 2];
  }
  for (int64_t i = 0; i < R / 2; ++i) {
    const double t = double(p) * std::pow(10000.0, -2.0 * double(i) / double(R));
    y[size_t(i)] = a[size_t(i)] * std::cos(t) - b[size_t(i)] * std::sin(t);
    y[size_t(i + R / 2)] = b[size_t(i)] * std::cos(t) + a[size_t(i)] * std::sin(t);
  }
  return y;
}

// x + DeepseekV3Attention(rmsnorm(x)) in double, head by head.
std::vector<double> direct_attention_block(MlaCase& s) {
  const BlockDims& d = s.d;
  const MlaDims& m = d.mla;
  const int64_t N = s.B * s.T, C = d.C, H = d.H, Dq = d.D, L = m.kv_lora, Rr = m.rope, KW = m.nope + m.v;
  const auto h = rmsnorm(s.x, s.w["ln1"], N, C, d.eps);
  const auto q = m.q_lora ? matmul_t(rmsnorm(matmul_t(h, s.w["q_a"], N, C, m.q_lora), s.w["q_a_norm"], N, m.q_lora,
                                             d.eps),
                                     s.w["q_b"], N, m.q_lora, H * Dq)
                          : matmul_t(h, s.w["wq"], N, C, H * Dq);
  const auto ckv = matmul_t(h, s.w["kv_a"], N, C, L + Rr);
  std::vector<double> lat(size_t(N * L));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i) lat[size_t(n * L + i)] = ckv[size_t(n * (L + Rr) + i)];
  const auto kv = matmul_t(rmsnorm(lat, s.w["kv_a_norm"], N, L, d.eps), s.w["kv_b"], N, L, H * KW);
  const double scale = m.scale > 0 ? m.scale : 1 / std::sqrt(double(Dq));
  std::vector<double> o(size_t(N * H * m.v));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t j = 0; j < H; ++j)
      for (int64_t i = 0; i < s.T; ++i) {
        const int64_t ni = b * s.T + i;
        const auto qr = hf_rope(&q[size_t((ni * H + j) * Dq + m.nope)], Rr, i, m.interleave);
        std::vector<double> sc(size_t(s.T), -INFINITY);
        double mx = -INFINITY;
        for (int64_t t = 0; t <= i; ++t) {
          const int64_t nt = b * s.T + t;
          if (s.key_mask() && !s.key_mask()[nt]) continue;
          const auto kr = hf_rope(&ckv[size_t(nt * (L + Rr) + L)], Rr, t, m.interleave);
          double acc = 0;
          for (int64_t e = 0; e < m.nope; ++e) acc += q[size_t((ni * H + j) * Dq + e)] * kv[size_t((nt * H + j) * KW + e)];
          for (int64_t e = 0; e < Rr; ++e) acc += qr[size_t(e)] * kr[size_t(e)];
          sc[size_t(t)] = acc * scale;
          mx = std::max(mx, sc[size_t(t)]);
        }
        double sum = 0;
        for (int64_t t = 0; t <= i; ++t) sum += sc[size_t(t)] == -INFINITY ? 0 : std::exp(sc[size_t(t)] - mx);
        for (int64_t t = 0; t <= i; ++t) {
          if (sc[size_t(t)] == -INFINITY) continue;
          const double pr = std::exp(sc[size_t(t)] - mx) / sum;
          for (int64_t e = 0; e < m.v; ++e)
            o[size_t((ni * H + j) * m.v + e)] += pr * kv[size_t(((b * s.T + t) * H + j) * KW + m.nope + e)];
        }
      }
  auto y = matmul_t(o, s.w["wo"], N, H * m.v, C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      y[size_t(n * C + c)] += s.x[size_t(n * C + c)] + (s.w.count("bo") ? s.w["bo"][size_t(c)] : 0.0);
  return y;
}

class MlaBlockTest : public ::testing::TestWithParam<MlaVariant> {};

TEST_P(MlaBlockTest, ForwardMatchesTransformersFormula) {
  MlaCase s(GetParam());
  std::fill(s.w["wd"].begin(), s.w["wd"].end(), 0.0);  // the MLP adds nothing: y = x + attention
  ref::RefOps<double> ops;
  BlockRunner<ref::RefOps<double>> run(ops, s.d);
  std::vector<double> y(s.x.size());
  BlockRunner<ref::RefOps<double>>::Cache c;
  run.forward(mla_ptrs<const double*>(s.w), s.aux(), s.x.data(), y.data(), c);
  const auto want = direct_attention_block(s);
  EXPECT_LT(rel_err(y.data(), want.data(), y.size()), 1e-12);
}

TEST_P(MlaBlockTest, ReferenceBackwardMatchesFiniteDifferences) {
  MlaCase s(GetParam());
  ref::RefOps<double> ops;
  BlockRunner<ref::RefOps<double>> run(ops, s.d);
  std::vector<double> y(s.x.size()), dx(s.x.size());
  auto loss = [&] {
    BlockRunner<ref::RefOps<double>>::Cache c;
    run.forward(mla_ptrs<const double*>(s.w), s.aux(), s.x.data(), y.data(), c);
    return dot(y, s.R);
  };
  Named<double> grads;
  for (auto& [k, v] : s.w) grads[k].assign(v.size(), 0.0);
  BlockRunner<ref::RefOps<double>>::Cache c;
  run.forward(mla_ptrs<const double*>(s.w), s.aux(), s.x.data(), y.data(), c);
  run.backward(mla_ptrs<const double*>(s.w), s.aux(), c, s.R.data(), dx.data(), mla_ptrs<double*>(grads));
  expect_grad_matches_fd("dx", s.x, dx, loss, 1e-6, 200);
  for (auto& [k, v] : s.w) expect_grad_matches_fd("d" + k, v, grads[k], loss, 1e-6, 200);
}

TEST_P(MlaBlockTest, CpuBlockMatchesReference) {
  MlaCase s(GetParam());
  Named<float> wf;
  for (auto& [k, w] : s.w) { wf[k] = cast<float>(w); w = cast<double>(wf[k]); }
  auto xf = cast<float>(s.x), Rf = cast<float>(s.R), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  s.x = cast<double>(xf); s.R = cast<double>(Rf); s.cs = cast<double>(csf); s.sn = cast<double>(snf);
  ref::RefOps<double> rops;
  BlockRunner<ref::RefOps<double>> rrun(rops, s.d);
  std::vector<double> y(s.x.size()), dx(s.x.size());
  Named<double> g;
  for (auto& [k, w] : s.w) g[k].assign(w.size(), 0.0);
  BlockRunner<ref::RefOps<double>>::Cache rc;
  rrun.forward(mla_ptrs<const double*>(s.w), s.aux(), s.x.data(), y.data(), rc);
  rrun.backward(mla_ptrs<const double*>(s.w), s.aux(), rc, s.R.data(), dx.data(), mla_ptrs<double*>(g));

  Context ctx(Device{}, 2);
  cpu::CpuOps cops{ctx};
  BlockRunner<cpu::CpuOps> crun(cops, s.d);
  BlockAux<float> caux{s.B, s.T, s.pos.data(), csf.data(), snf.data(), s.key_mask()};
  std::vector<float> yf(xf.size()), dxf(xf.size());
  Named<float> gf;
  for (auto& [k, w] : wf) gf[k].assign(w.size(), 0.f);
  BlockRunner<cpu::CpuOps>::Cache cc;
  crun.forward(mla_ptrs<const float*>(wf), caux, xf.data(), yf.data(), cc);
  crun.backward(mla_ptrs<const float*>(wf), caux, cc, Rf.data(), dxf.data(), mla_ptrs<float*>(gf));
  EXPECT_LT(rel_err(yf.data(), y.data(), y.size()), 1e-5) << "y";
  EXPECT_LT(rel_err(dxf.data(), dx.data(), dx.size()), 1e-5) << "dx";
  for (auto& [k, w] : g) EXPECT_LT(rel_err(gf[k].data(), w.data(), w.size()), 1e-5) << "d" << k;

  // Without dx (what tuning asks for) the weight gradients are the same bits.
  Named<float> gn;
  for (auto& [k, w] : wf) gn[k].assign(w.size(), 0.f);
  auto gp = mla_ptrs<float*>(gn);
  gp.ln1 = nullptr;
  crun.backward(mla_ptrs<const float*>(wf), caux, cc, Rf.data(), nullptr, gp);
  for (auto& [k, w] : gn) {
    if (k != "ln1") {
      EXPECT_TRUE(w == gf[k]) << "d" << k << " differs without dx";
    }
  }
}

// Decoding token by token through the expanded key/value cache gives the full forward's outputs.
TEST_P(MlaBlockTest, KvCacheDecodeEqualsFullForward) {
  if (GetParam().mask) GTEST_SKIP() << "decoding has no key mask";
  MlaCase s(GetParam(), 1);
  Named<float> wf;
  for (auto& [k, w] : s.w) wf[k] = cast<float>(w);
  auto xf = cast<float>(s.x), csf = cast<float>(s.cs), snf = cast<float>(s.sn);
  Context ctx(Device{}, 1);
  cpu::CpuOps ops{ctx};
  BlockRunner<cpu::CpuOps> run(ops, s.d);
  std::vector<float> full(xf.size()), step(xf.size());
  BlockRunner<cpu::CpuOps>::Cache c;
  run.forward(mla_ptrs<const float*>(wf), {1, s.T, s.pos.data(), csf.data(), snf.data(), nullptr}, xf.data(),
              full.data(), c);
  auto kv = run.make_kv_cache(s.T);
  for (int64_t t = 0; t < s.T; ++t) {
    BlockRunner<cpu::CpuOps>::Cache ct;
    run.forward(mla_ptrs<const float*>(wf), {1, 1, s.pos.data() + t, csf.data(), snf.data(), nullptr},
                xf.data() + t * s.d.C, step.data() + t * s.d.C, ct, &kv);
  }
  EXPECT_LT(rel_err(step.data(), full.data(), full.size()), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Variants, MlaBlockTest,
                         ::testing::Values(MlaVariant{"deepseek_v3", 6, true, false, false, 0.0},
                                           MlaVariant{"no_q_lora", 0, false, false, true, 0.0},
                                           MlaVariant{"masked", 6, true, true, false, 0.0},
                                           MlaVariant{"yarn_scale", 0, true, false, false, 0.61}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
