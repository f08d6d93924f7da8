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
#include "bench_block.h"
#include "quant/signround.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

using bench::arg;
using bench::rnd;

int main(int argc, char** argv) {
  Context ctx(Device{}, int(arg(argc, argv, "--threads", 0)));
  bench::BenchBlock blk = bench::make_block(ctx, argc, argv, 2048, 8192, 32, 8, 512);
  const BlockDims& d = blk.d;
  const int64_t T = blk.T, n = blk.n, bs = n;
  const int iters = int(arg(argc, argv, "--iters", 3));
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
  BlockWeights& w = blk.w;
  const Tensor &x = blk.x, &y = blk.y;
  const auto& mask = blk.mask;
  BlockAux<float> aux = blk.aux();
  quant::SignRoundOptions o;
  o.batch_size = bs;
  o.iters = 1;  // warm-up: allocator, BLAS buffers
  { BlockWeights w2 = w; w2.wq = w.wq.clone(ctx); quant::signround_tune_block(ctx, d, w2, {4, 128, true}, aux, x, y, mask, o); }
  o.iters = iters;
  auto t0 = Clock::now();
  quant::BlockTuneResult r = quant::signround_tune_block(ctx, d, w, {4, 128, true}, aux, x, y, mask, o);
  const double total = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  const double flops = blk.flops();
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
