// A small decoder block with random double weights in eight variants (Llama, q/k/v/o biases, Qwen3 q/k
// norm, a key padding mask, Gemma 3: sandwich norms, the GeLU-tanh gate, q/k norm, its own softmax scale
// and a 3-key window; Gated DeltaNet's linear attention with a padded token, with Qwen3-Next's fused or
// Qwen3.5's split projections; Qwen3-Next's gated attention: the output gate, q/k norm, partial RoPE,
// biases), for the block tests on every backend (test_block.cpp, test_cuda.cpp).
#pragma once
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "model/block_dims.h"
#include "test_util.h"

namespace ar::test {

// RoPE tables [T, D/2] (base 10000) in double and the positions of B samples of T tokens.
inline void rope_inputs(int64_t B, int64_t T, int64_t D, std::vector<double>& cs, std::vector<double>& sn,
                        std::vector<int32_t>& pos) {
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = double(p) * std::pow(10000.0, -2.0 * double(i) / double(D));
      cs.push_back(std::cos(a));
      sn.push_back(std::sin(a));
    }
  for (int64_t i = 0; i < B * T; ++i) pos.push_back(int32_t(i % T));
}

struct Variant {
  const char* name;
  bool bias, qk_norm, mask;
  bool gemma = false;
  bool deltanet = false;
  bool out_gate = false;  // with partial RoPE (2 of 6 dims)
  bool split = false;     // deltanet with Qwen3.5's split projections
};
inline void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

struct Weights {
  std::map<std::string, std::vector<double>> t;
  template <class P, class V>
  static BlockPtrs<P> ptrs(std::map<std::string, V>& m) {
    BlockPtrs<P> p;
    auto get = [&](const char* k) -> P { auto it = m.find(k); return it == m.end() ? nullptr : it->second.data(); };
    p.ln1 = get("ln1"); p.wq = get("wq"); p.wk = get("wk"); p.wv = get("wv"); p.bq = get("bq"); p.bk = get("bk");
    p.bv = get("bv"); p.q_norm = get("q_norm"); p.k_norm = get("k_norm"); p.wo = get("wo"); p.bo = get("bo");
    p.ln2 = get("ln2"); p.wg = get("wg"); p.wu = get("wu"); p.wd = get("wd");
    p.ln_post_attn = get("ln_pa"); p.ln_post_ffn = get("ln_pf");
    p.in_qkvz = get("in_qkvz"); p.in_ba = get("in_ba"); p.conv = get("conv"); p.dt_bias = get("dt_bias");
    p.A_log = get("A_log"); p.dnorm = get("dnorm"); p.in_z = get("in_z"); p.in_b = get("in_b"); p.in_a = get("in_a");
    if (p.in_qkvz) p.attn = AttnKind::DeltaNet;
    p.delta_split = p.in_z != nullptr;
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
    d.out_gate = v.out_gate;
    d.rope = v.out_gate ? 2 : 0;
    const int64_t QD = d.H * d.D, KD = d.Hkv * d.D, QW = v.out_gate ? 2 * QD : QD;
    uint32_t seed = 100;
    auto add = [&](const char* k, int64_t n, double scale, double mean = 0) {
      auto r = randn<double>(size_t(n), seed++, scale);
      for (auto& e : r) e += mean;
      w.t[k] = r;
    };
    add("ln1", d.C, 0.2, 1.0); add("ln2", d.C, 0.2, 1.0);
    if (v.deltanet) {  // 2 key heads of 4, 4 value heads of 3, a 3-tap conv; decays exp(g) around 0.5
      d.attn = AttnKind::DeltaNet;
      d.delta = {2, 4, 4, 3, 3, v.split};
      const DeltaDims& e = d.delta;
      if (v.split) {
        add("in_qkvz", e.conv_dim() * d.C, 0.4); add("in_z", e.value_dim() * d.C, 0.4);
        add("in_b", e.Hv * d.C, 0.4); add("in_a", e.Hv * d.C, 0.4);
      } else {
        add("in_qkvz", e.Hk * (2 * e.Dk + 2 * (e.Hv / e.Hk) * e.Dv) * d.C, 0.4); add("in_ba", 2 * e.Hv * d.C, 0.4);
      }
      add("conv", e.conv_dim() * e.K, 0.5); add("dt_bias", e.Hv, 0.5); add("A_log", e.Hv, 0.3, -0.5);
      add("dnorm", e.Dv, 0.2, 1.0); add("wo", d.C * e.value_dim(), 0.3);
    } else {
      add("wq", QW * d.C, 0.4); add("wk", KD * d.C, 0.4); add("wv", KD * d.C, 0.4); add("wo", d.C * QD, 0.3);
    }
    add("wg", d.I * d.C, 0.4); add("wu", d.I * d.C, 0.4); add("wd", d.C * d.I, 0.3);
    if (v.bias) { add("bq", QW, 0.2); add("bk", KD, 0.2); add("bv", KD, 0.2); add("bo", d.C, 0.2); }
    if (v.qk_norm) { add("q_norm", d.D, 0.2, 1.0); add("k_norm", d.D, 0.2, 1.0); }
    if (v.gemma) {
      d.sandwich = true;
      d.act = {GateKind::GeluTanh};
      d.scale = 0.3;
      d.window = 3;
      add("ln_pa", d.C, 0.2, 1.0); add("ln_pf", d.C, 0.2, 1.0);
    }
    x = randn<double>(size_t(B * T * d.C), 7);
    R = randn<double>(x.size(), 8);
    rope_inputs(B, T, d.rope ? d.rope : d.D, cs, sn, pos);
    mask.assign(size_t(B * T), 1);
    if (masked) { mask[size_t(T)] = 0; mask[size_t(T + 3)] = 0; }
  }
  const uint8_t* key_mask() const { return masked ? mask.data() : nullptr; }
};

}  // namespace ar::test
