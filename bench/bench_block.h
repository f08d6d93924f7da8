// A random Llama-shaped decoder block with calibration inputs/targets for the tuning benchmarks.
//   --hidden --inter --heads --kv --head_dim --seq --bs (samples = bs)
//   --experts E --topk K: a mixture-of-experts block of E experts of --inter (top-K renormalized, a
//   router drawn wide enough that routing is spread), e.g. Qwen3-30B-A3B's: --hidden 2048 --inter 768
//   --heads 32 --kv 4 --head_dim 128 --experts 128 --topk 8. FLOPs count the active weights.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/context.h"
#include "model/block_tensors.h"
#include "model/loader.h"

namespace ar::bench {

inline int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return def;
}
inline const char* sarg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

inline Tensor rnd(Context& ctx, Shape s, uint64_t seed, float scale, float mean = 0) {
  Tensor t = Tensor::empty(s, DType::F32, ctx);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    t.f32()[i] = mean + scale * (float(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  return t;
}

struct BenchBlock {
  BlockDims d;
  int64_t T = 0, n = 0;
  BlockWeights w;
  Tensor x, y;
  std::vector<float> cs, sn;
  std::vector<int32_t> pos;
  std::vector<uint8_t> mask;
  BlockAux<float> aux() const { return {1, T, pos.data(), cs.data(), sn.data(), nullptr}; }
  // Parameters each token meets: attention, and the dense MLP or its K experts and the router.
  double params() const {
    const double QD = double(d.H * d.D), KD = double(d.Hkv * d.D);
    const double ffn = d.is_moe() ? double(d.moe.K) * 3.0 * double(d.moe.I * d.C) + double(d.moe.E * d.C)
                                  : 3.0 * double(d.I * d.C);
    return QD * double(d.C) * 2 + KD * double(d.C) * 2 + ffn;
  }
  // Model FLOPs of one iteration: forward 2 N params + causal attention, backward twice that.
  double flops() const {
    const double N = double(n * T), attn = 4.0 * double(n * d.H * d.D) * double(T) * double(T + 1) / 2.0;
    return 6.0 * N * params() + 3 * attn;
  }
};

inline BenchBlock make_block(Context& ctx, int argc, char** argv, int64_t hidden, int64_t inter, int64_t heads,
                             int64_t kv, int64_t seq, int64_t head_dim = 64) {
  BenchBlock b;
  BlockDims& d = b.d;
  d.C = arg(argc, argv, "--hidden", hidden);
  d.I = arg(argc, argv, "--inter", inter);
  d.H = arg(argc, argv, "--heads", heads);
  d.Hkv = arg(argc, argv, "--kv", kv);
  d.D = arg(argc, argv, "--head_dim", head_dim);
  d.eps = 1e-5;
  b.T = arg(argc, argv, "--seq", seq);
  b.n = arg(argc, argv, "--bs", 8);
  const int64_t QD = d.H * d.D, KD = d.Hkv * d.D;
  BlockWeights& w = b.w;
  w.ln1 = rnd(ctx, {d.C}, 3, 0.1f, 1.f);
  w.ln2 = rnd(ctx, {d.C}, 4, 0.1f, 1.f);
  w.wq = rnd(ctx, {QD, d.C}, 5, 1.f / std::sqrt(float(d.C)));
  w.wk = rnd(ctx, {KD, d.C}, 6, 1.f / std::sqrt(float(d.C)));
  w.wv = rnd(ctx, {KD, d.C}, 7, 1.f / std::sqrt(float(d.C)));
  w.wo = rnd(ctx, {d.C, QD}, 8, 1.f / std::sqrt(float(QD)));
  d.moe.E = arg(argc, argv, "--experts", 0);
  if (d.is_moe()) {
    d.moe.K = arg(argc, argv, "--topk", 8);
    d.moe.I = d.I;
    d.moe.norm_topk = true;
    w.router = rnd(ctx, {d.moe.E, d.C}, 14, 4.f / std::sqrt(float(d.C)));
    for (int64_t e = 0; e < d.moe.E; ++e) {
      w.eg.push_back(rnd(ctx, {d.I, d.C}, 100 + 3 * uint64_t(e), 1.f / std::sqrt(float(d.C))));
      w.eu.push_back(rnd(ctx, {d.I, d.C}, 101 + 3 * uint64_t(e), 1.f / std::sqrt(float(d.C))));
      w.ed.push_back(rnd(ctx, {d.C, d.I}, 102 + 3 * uint64_t(e), 1.f / std::sqrt(float(d.I))));
    }
  } else {
    w.wg = rnd(ctx, {d.I, d.C}, 9, 1.f / std::sqrt(float(d.C)));
    w.wu = rnd(ctx, {d.I, d.C}, 10, 1.f / std::sqrt(float(d.C)));
    w.wd = rnd(ctx, {d.C, d.I}, 11, 1.f / std::sqrt(float(d.I)));
  }
  w.tensors = block_tensors(d);
  b.x = rnd(ctx, {b.n, b.T, d.C}, 12, 1.f);
  b.y = rnd(ctx, {b.n, b.T, d.C}, 13, 1.f);
  b.cs.resize(size_t(b.T * d.D / 2));
  b.sn.resize(b.cs.size());
  for (int64_t p = 0; p < b.T; ++p)
    for (int64_t i = 0; i < d.D / 2; ++i) {
      double a = double(p) * std::pow(500000.0, -2.0 * double(i) / double(d.D));
      b.cs[size_t(p * d.D / 2 + i)] = float(std::cos(a));
      b.sn[size_t(p * d.D / 2 + i)] = float(std::sin(a));
    }
  b.pos.resize(size_t(b.n * b.T));
  for (int64_t i = 0; i < b.n * b.T; ++i) b.pos[size_t(i)] = int32_t(i % b.T);
  b.mask.assign(size_t(b.n * b.T), 1);
  return b;
}

}  // namespace ar::bench
