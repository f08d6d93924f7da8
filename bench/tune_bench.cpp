// SignRound tuning throughput for one decoder block: per-iteration time split into phases (QDQ of
// all Linears, block forward, block backward, QDQ backward + sign-SGD step) and achieved GFLOP/s over
// the SGEMM peak measured in the same run. Default shape: a Llama-3.2-1B block (hidden 2048,
// intermediate 8192, 32 heads, 8 KV heads, head_dim 64), batch 8 x seqlen 512, W4G128 sym.
// FLOPs: model FLOPs of forward (2 N params + causal attention) and backward (4 N params + 2x attention);
// the QDQ and step phases are counted as overhead, not FLOPs. Last line: one JSON object.
//   tune_bench [--hidden 2048] [--inter 8192] [--heads 32] [--kv 8] [--head_dim 64] [--seq 512] [--bs 8]
//              [--iters 3] [--threads 0]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "core/context.h"
#include "kernels/cpu/ops.h"
#include "model/loader.h"
#include "quant/signround.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

namespace {
int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return def;
}
Tensor rnd(Context& ctx, Shape s, uint64_t seed, float scale, float mean = 0) {
  Tensor t = Tensor::empty(s, DType::F32, ctx);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    t.f32()[i] = mean + scale * (float(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  BlockDims d;
  d.C = arg(argc, argv, "--hidden", 2048);
  d.I = arg(argc, argv, "--inter", 8192);
  d.H = arg(argc, argv, "--heads", 32);
  d.Hkv = arg(argc, argv, "--kv", 8);
  d.D = arg(argc, argv, "--head_dim", 64);
  d.eps = 1e-5;
  const int64_t T = arg(argc, argv, "--seq", 512), bs = arg(argc, argv, "--bs", 8);
  const int iters = int(arg(argc, argv, "--iters", 3));
  Context ctx(Device{}, int(arg(argc, argv, "--threads", 0)));
  const int64_t QD = d.H * d.D, KD = d.Hkv * d.D, n = bs;
  // SGEMM peak in this run.
  double peak = 0;
  {
    const int m = 2048;
    Tensor a = rnd(ctx, {m, m}, 1, 1), b = rnd(ctx, {m, m}, 2, 1), c = Tensor::empty({m, m}, DType::F32, ctx);
    for (int r = 0; r < 3; ++r) {
      auto t0 = Clock::now();
      cpu::gemm(ctx, false, true, m, m, m, 1.f, a.f32(), m, b.f32(), m, 0.f, c.f32(), m);
      peak = std::max(peak, 2.0 * m * m * double(m) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    }
  }
  BlockWeights w;
  w.ln1 = rnd(ctx, {d.C}, 3, 0.1f, 1.f);
  w.ln2 = rnd(ctx, {d.C}, 4, 0.1f, 1.f);
  w.wq = rnd(ctx, {QD, d.C}, 5, 1.f / std::sqrt(float(d.C)));
  w.wk = rnd(ctx, {KD, d.C}, 6, 1.f / std::sqrt(float(d.C)));
  w.wv = rnd(ctx, {KD, d.C}, 7, 1.f / std::sqrt(float(d.C)));
  w.wo = rnd(ctx, {d.C, QD}, 8, 1.f / std::sqrt(float(QD)));
  w.wg = rnd(ctx, {d.I, d.C}, 9, 1.f / std::sqrt(float(d.C)));
  w.wu = rnd(ctx, {d.I, d.C}, 10, 1.f / std::sqrt(float(d.C)));
  w.wd = rnd(ctx, {d.C, d.I}, 11, 1.f / std::sqrt(float(d.I)));
  Tensor x = rnd(ctx, {n, T, d.C}, 12, 1.f), y = rnd(ctx, {n, T, d.C}, 13, 1.f);
  std::vector<float> cs(size_t(T * d.D / 2)), sn(cs.size());
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < d.D / 2; ++i) {
      double a = double(p) * std::pow(500000.0, -2.0 * double(i) / double(d.D));
      cs[size_t(p * d.D / 2 + i)] = float(std::cos(a));
      sn[size_t(p * d.D / 2 + i)] = float(std::sin(a));
    }
  std::vector<int32_t> pos(static_cast<size_t>(n * T));
  for (int64_t i = 0; i < n * T; ++i) pos[size_t(i)] = int32_t(i % T);
  std::vector<uint8_t> mask(size_t(n * T), 1);
  BlockAux<float> aux{1, T, pos.data(), cs.data(), sn.data(), nullptr};
  quant::SignRoundOptions o;
  o.batch_size = bs;
  o.iters = 1;  // warm-up: allocator, BLAS buffers
  { BlockWeights w2 = w; w2.wq = w.wq.clone(ctx); quant::signround_tune_block(ctx, d, w2, {4, 128, true}, aux, x, y, mask, o); }
  o.iters = iters;
  auto t0 = Clock::now();
  quant::BlockTuneResult r = quant::signround_tune_block(ctx, d, w, {4, 128, true}, aux, x, y, mask, o);
  const double total = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  const double params = double(QD * d.C * 2 + KD * d.C * 2 + 3 * d.I * d.C), N = double(n * T);
  const double attn = 4.0 * double(n * d.H * d.D) * double(T) * double(T + 1) / 2.0;
  const double flops = 6.0 * N * params + 3 * attn;
  const auto& p = r.phases;
  const double q = p.qdq / iters, f = p.forward / iters, b = p.backward / iters, s = p.step / iters;
  std::printf("tune_bench: hidden %lld, inter %lld, heads %lld/%lld, head_dim %lld, %lld x %lld tokens, %d threads\n",
              (long long)d.C, (long long)d.I, (long long)d.H, (long long)d.Hkv, (long long)d.D, (long long)n,
              (long long)T, ctx.threads());
  std::printf("per iteration: %.3f s = qdq %.3f + forward %.3f + backward %.3f + step %.3f (+ %.3f other)\n", total, q,
              f, b, s, total - q - f - b - s);
  std::printf("%.1f GFLOP/s over the whole iteration = %.1f%% of the SGEMM peak %.1f GFLOP/s (fwd+bwd alone %.1f%%); "
              "peak RSS %.0f MiB\n",
              flops / total / 1e9, 100 * flops / total / 1e9 / peak, peak, 100 * flops / (f + b) / 1e9 / peak,
              peak_rss_mb());
  std::printf("{\"bench\":\"signround_iteration\",\"tokens\":%lld,\"iter_s\":%.4f,\"qdq_s\":%.4f,\"fwd_s\":%.4f,"
              "\"bwd_s\":%.4f,\"step_s\":%.4f,\"gflops\":%.2f,\"sgemm_peak_gflops\":%.2f,\"ratio\":%.4f,"
              "\"peak_rss_mb\":%.1f}\n",
              (long long)(n * T), total, q, f, b, s, flops / total / 1e9, peak, flops / total / 1e9 / peak,
              peak_rss_mb());
  return 0;
}
