// A random decoder block with calibration inputs/targets for the tuning benchmarks.
//   --hidden --inter --heads --kv --head_dim --seq --bs (samples = bs); --partial_rope R: RoPE on a head's
//   first R dims (GLM-4.5)
//   --experts E --topk K: a mixture-of-experts block of E experts of --inter (top-K renormalized, a
//   router drawn wide enough that routing is spread), e.g. Qwen3-30B-A3B's: --hidden 2048 --inter 768
//   --heads 32 --kv 4 --head_dim 128 --experts 128 --topk 8. --shared N: N shared experts' width beside
//   them; --routing sigmoid --groups G --topk_groups g --scaling s: DeepSeek-V3's router (the shared
//   experts then ungated).
//   --kv_lora R (with --q_lora, --nope, --rope_dim, --v_dim): multi-head latent attention instead of
//   GQA (DeepSeek-V3: --q_lora 1536 --kv_lora 512 --nope 128 --rope_dim 64 --v_dim 128 --heads 128).
//   --gpt_oss 1 [--window W]: gpt-oss's block (attention sinks, a W-key sliding window (default 128),
//   the biased router's top-k softmax, biased experts with the clamped SwiGLU), e.g. gpt-oss-120B's:
//   --hidden 2880 --inter 2880 --heads 64 --kv 8 --head_dim 64 --experts 128 --topk 4.
//   --gemma3 1 [--window W]: Gemma 3's dense block (sandwich norms, q/k norm, the GeLU-tanh MLP, a W-key
//   sliding window (default 1024), queries scaled by 1/sqrt(head_dim)), e.g. Gemma-3-12B's: --hidden 3840
//   --inter 15360 --heads 16 --kv 8 --head_dim 256.
//   --qwen3_next 1: Qwen3-Next's gated full attention (the sigmoid output gate from q_proj, q/k norm, RoPE
//   on a quarter of each head unless --partial_rope says otherwise); with --deltanet 1 its Gated DeltaNet
//   layer instead (--lin_kh 16 key heads of --lin_dk 128, --lin_vh 32 value heads of --lin_dv 128, a
//   4-tap conv), e.g. Qwen3-Next-80B-A3B's: --hidden 2048 --heads 16 --kv 2 --head_dim 256 --inter 512
//   --experts 512 --topk 10 --shared 1.
// FLOPs count the active weights; Gated DeltaNet's recurrence counts 6 Dk Dv per token and value head
// (S^T k, k d^T, S^T q) forward.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/context.h"
#include "model/block_tensors.h"
#include "model/loader.h"
#include "bench_args.h"

namespace ar::bench {

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
  // Parameters each token meets: the attention Linears, and the dense MLP or its K experts, the shared
  // experts and the router.
  double params() const {
    double attn = 0;
    if (d.attn == AttnKind::Mla) {
      const MlaDims& m = d.mla;
      const double qk = double(m.nope + m.rope);
      attn = (m.q_lora ? double(d.C * m.q_lora) + double(m.q_lora * d.H) * qk : double(d.C * d.H) * qk) +
             double(d.C * (m.kv_lora + m.rope)) + double(m.kv_lora * d.H * (m.nope + m.v)) + double(d.H * m.v * d.C);
    } else if (d.attn == AttnKind::DeltaNet) {
      const DeltaDims& e = d.delta;
      attn = double(d.C) * double(2 * e.key_dim() + 2 * e.value_dim() + 2 * e.Hv) + double(e.value_dim() * d.C);
    } else {
      attn = double(d.H * d.D) * double(d.C) * (d.out_gate ? 3 : 2) + double(d.Hkv * d.D) * double(d.C) * 2;
    }
    const double ffn = d.is_moe() ? double(d.moe.K) * 3.0 * double(d.moe.I * d.C) + double(d.moe.E * d.C) +
                                        3.0 * double(d.moe.Is * d.C)
                                  : 3.0 * double(d.I * d.C);
    return attn + ffn;
  }
  // Model FLOPs of one iteration: forward 2 N params + causal attention (q k^T and p v over the query
  // and value head widths), backward twice that.
  double flops() const {
    const double qk = d.attn == AttnKind::Mla ? double(d.mla.nope + d.mla.rope) : double(d.D);
    const double v = d.attn == AttnKind::Mla ? double(d.mla.v) : double(d.D);
    const double N = double(n * T);
    const double attn = d.attn == AttnKind::DeltaNet
                            ? N * double(d.delta.Hv) * 6.0 * double(d.delta.Dk * d.delta.Dv)
                            : 2.0 * double(n * d.H) * (qk + v) * double(T) * double(T + 1) / 2.0;
    return 6.0 * N * params() + 3 * attn;
  }
};

// The block's shapes from the flags (defaults: a dense Llama-style block of the given sizes).
inline BlockDims bench_dims(int argc, char** argv, int64_t hidden, int64_t inter, int64_t heads, int64_t kv,
                            int64_t head_dim) {
  BlockDims d;
  d.C = arg(argc, argv, "--hidden", hidden);
  d.I = arg(argc, argv, "--inter", inter);
  d.H = arg(argc, argv, "--heads", heads);
  d.Hkv = arg(argc, argv, "--kv", kv);
  d.D = arg(argc, argv, "--head_dim", head_dim);
  d.rope = arg(argc, argv, "--partial_rope", 0);
  d.eps = 1e-5;
  if (const int64_t kv_lora = arg(argc, argv, "--kv_lora", 0); kv_lora > 0) {
    d.attn = AttnKind::Mla;
    d.mla = {arg(argc, argv, "--q_lora", 0), kv_lora, arg(argc, argv, "--nope", 128), arg(argc, argv, "--rope_dim", 64),
             arg(argc, argv, "--v_dim", 128), true, 0};
    d.Hkv = d.H;
    d.D = d.mla.nope + d.mla.rope;  // as ModelConfig::block_dims: the query/key head
  }
  if (arg(argc, argv, "--qwen3_next", 0)) {
    d.out_gate = d.qk_norm = true;
    if (!d.rope) d.rope = d.D / 4;
  }
  if (arg(argc, argv, "--deltanet", 0)) {
    d.attn = AttnKind::DeltaNet;
    d.out_gate = false;
    d.delta = {arg(argc, argv, "--lin_kh", 16), arg(argc, argv, "--lin_vh", 32), arg(argc, argv, "--lin_dk", 128),
               arg(argc, argv, "--lin_dv", 128), 4};
  }
  if (arg(argc, argv, "--gemma3", 0)) {
    d.sandwich = d.qk_norm = true;
    d.act = {GateKind::GeluTanh};
    d.window = arg(argc, argv, "--window", 1024);
  }
  d.moe.E = arg(argc, argv, "--experts", 0);
  if (d.is_moe()) {
    d.moe.K = arg(argc, argv, "--topk", 8);
    d.moe.I = d.I;
    d.moe.norm_topk = true;
    d.moe.Is = arg(argc, argv, "--shared", 0) * d.I;
    if (arg(argc, argv, "--gpt_oss", 0)) {
      d.moe.routing = Routing::TopKSoftmax;
      d.moe.norm_topk = false;
      d.moe.expert_bias = true;
      d.act = {GateKind::ClampedSwiglu, 1.702f, 7.0f};
      d.sinks = true;
      d.window = arg(argc, argv, "--window", 128);
    }
    if (std::strcmp(sarg(argc, argv, "--routing", "softmax"), "sigmoid") == 0) {
      d.moe.routing = Routing::SigmoidGroups;
      d.moe.groups = arg(argc, argv, "--groups", 1);
      d.moe.topk_groups = arg(argc, argv, "--topk_groups", 1);
      d.moe.scaling = std::atof(sarg(argc, argv, "--scaling", "1"));
      d.moe.shared_gate = false;
    }
  }
  return d;
}

// Every tensor of the block's table (model/block_tensors.h) drawn at random: norms near 1, Linears at
// 1/sqrt(in), the router wide enough that routing is spread, a small score-correction bias.
inline void fill_block(Context& ctx, const BlockDims& d, BlockWeights& w) {
  w.tensors = block_tensors(d);
  w.attn = d.attn;
  w.size_lists();
  uint64_t seed = 3;
  for (const BlockTensor& t : w.tensors) {
    const bool router = t.field == &BlockWeights::router;
    float scale = t.shape.size() == 2 ? 1.f / std::sqrt(float(t.shape[1])) : 0.1f, mean = 0;
    if (t.role == TensorRole::Norm) mean = 1;
    if (router) scale = 4.f / std::sqrt(float(d.C));
    if (t.field == &BlockWeights::score_bias) scale = 0.01f;
    t.in(w) = rnd(ctx, t.shape, seed++, scale, mean);
  }
}

inline BenchBlock make_block(Context& ctx, int argc, char** argv, int64_t hidden, int64_t inter, int64_t heads,
                             int64_t kv, int64_t seq, int64_t head_dim = 64) {
  BenchBlock b;
  b.d = bench_dims(argc, argv, hidden, inter, heads, kv, head_dim);
  const BlockDims& d = b.d;
  b.T = arg(argc, argv, "--seq", seq);
  b.n = arg(argc, argv, "--bs", 8);
  fill_block(ctx, d, b.w);
  b.x = rnd(ctx, {b.n, b.T, d.C}, 12, 1.f);
  b.y = rnd(ctx, {b.n, b.T, d.C}, 13, 1.f);
  const int64_t rd = d.attn == AttnKind::Mla ? d.mla.rope : d.rope ? d.rope : d.D;  // the rotated dims
  b.cs.resize(size_t(b.T * rd / 2));
  b.sn.resize(b.cs.size());
  for (int64_t p = 0; p < b.T; ++p)
    for (int64_t i = 0; i < rd / 2; ++i) {
      double a = double(p) * std::pow(500000.0, -2.0 * double(i) / double(rd));
      b.cs[size_t(p * rd / 2 + i)] = float(std::cos(a));
      b.sn[size_t(p * rd / 2 + i)] = float(std::sin(a));
    }
  b.pos.resize(size_t(b.n * b.T));
  for (int64_t i = 0; i < b.n * b.T; ++i) b.pos[size_t(i)] = int32_t(i % b.T);
  b.mask.assign(size_t(b.n * b.T), 1);
  return b;
}

}  // namespace ar::bench
