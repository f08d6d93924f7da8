// Shared by the SignRound and parallel-lane tests.
#pragma once
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "model/block_tensors.h"
#include "quant/signround.h"
#include "test_util.h"

namespace ar::test {

// A tensor of normal(mean, sd) values from a fixed seed.
inline Tensor random_tensor(Context& ctx, const Shape& s, uint32_t seed, double sd, double mean = 0) {
  Tensor t = Tensor::empty(s, DType::F32, ctx);
  auto v = test::randn<float>(size_t(t.numel()), seed, sd);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(mean) + v[size_t(i)];
  return t;
}

// RoPE tables [T, D/2] with base 10000.
inline void rope_tables(int64_t T, int64_t D, std::vector<float>& cs, std::vector<float>& sn) {
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = double(p) * std::pow(10000.0, -2.0 * double(i) / double(D));
      cs.push_back(float(std::cos(a)));
      sn.push_back(float(std::sin(a)));
    }
}

// A small Llama block (C 64, I 128, 4 heads, 2 KV heads) with random weights, n samples of T tokens
// and the FP block output y as the tuning target.
struct Fixture {
  Context ctx{Device{}, 2};
  BlockDims dims;
  BlockWeights w;
  int64_t n = 16, T = 32;
  std::vector<float> cs, sn;
  std::vector<int32_t> pos;
  Tensor x, y;
  std::vector<uint8_t> mask;

  Fixture() {
    dims.C = 64; dims.I = 128; dims.H = 4; dims.Hkv = 2; dims.D = 16; dims.eps = 1e-5;
    auto rnd = [&](Shape s, uint32_t seed, double sd, double mean = 0) { return random_tensor(ctx, s, seed, sd, mean); };
    w.ln1 = rnd({64}, 1, 0.1, 1); w.ln2 = rnd({64}, 2, 0.1, 1);
    w.wq = rnd({64, 64}, 3, 0.125); w.wk = rnd({32, 64}, 4, 0.125); w.wv = rnd({32, 64}, 5, 0.125);
    w.wo = rnd({64, 64}, 6, 0.125); w.wg = rnd({128, 64}, 7, 0.125); w.wu = rnd({128, 64}, 8, 0.125);
    w.wd = rnd({64, 128}, 9, 0.09);
    w.tensors = block_tensors(dims);
    rope_tables(T, dims.D, cs, sn);
    for (int64_t i = 0; i < n * T; ++i) pos.push_back(int32_t(i % T));
    x = rnd({n, T, 64}, 10, 1.0);
    y = Tensor::empty({n, T, 64}, DType::F32, ctx);
    forward(w, x, y);
    mask.assign(size_t(n * T), 1);
    for (int64_t s = 0; s < n; ++s) mask[size_t(s * T + T - 1)] = 0;  // last token masked, as AutoRound does
  }
  BlockAux<float> aux(int64_t B) const { return {B, T, pos.data(), cs.data(), sn.data(), nullptr}; }
  void forward(const BlockWeights& bw, const Tensor& in, Tensor& out) {
    cpu::CpuOps ops{ctx};
    BlockRunner<cpu::CpuOps> r(ops, dims);
    BlockRunner<cpu::CpuOps>::Cache c;
    r.forward(bw.ptrs(), aux(n), in.f32(), out.f32(), c);
  }
  double mse(const BlockWeights& bw) {
    Tensor out = Tensor::empty({n, T, 64}, DType::F32, ctx);
    forward(bw, x, out);
    double s = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n * T; ++i) {
      if (!mask[size_t(i)]) continue;
      for (int64_t c = 0; c < 64; ++c) {
        double d = double(out.f32()[i * 64 + c]) - double(y.f32()[i * 64 + c]);
        s += d * d;
      }
      cnt += 64;
    }
    return s / double(cnt);
  }
  BlockWeights copy() { return quant::clone_block(w, ctx); }
  quant::BlockTuneResult tune(BlockWeights& bw, const quant::QuantFormat& f, int iters, uint64_t seed = 42,
                              quant::SignRoundOptions o = {}, const quant::TuneLane& lane = {}) {
    o.iters = iters;
    o.seed = seed;
    return quant::signround_tune_block(ctx, dims, bw, f, aux(n), x, y, mask, o, lane);
  }
};

// The FP block's forward over a fixture's whole pool with every Linear's fp32 input kept in the cache
// (FP8_STATIC's input maxima read them). F: Fixture or another with ctx, dims, w, n, T, x and aux(B).
template <class F>
BlockRunner<cpu::CpuOps>::Cache fp_linear_inputs(F& f) {
  cpu::CpuOps ops{f.ctx};
  ops.keep_fp32 = true;
  BlockRunner<cpu::CpuOps> r(ops, f.dims);
  BlockRunner<cpu::CpuOps>::Cache c;
  Tensor out = Tensor::empty({f.n, f.T, f.dims.C}, DType::F32, f.ctx);
  r.forward(f.w.ptrs(), f.aux(f.n), f.x.f32(), out.f32(), c);
  return c;
}
}  // namespace ar::test
