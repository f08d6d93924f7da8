// Decoder-block forward + backward throughput on the CPU backend, against the SGEMM peak measured in
// the same run. Default shape: a Llama-3-8B block (hidden 4096, intermediate 14336, 32 heads,
// 8 KV heads, head_dim 128), one sequence of 512 tokens, random fp32 weights.
// FLOPs counted (model FLOPs): every Linear 2*N*in*out forward and 4*N*in*out backward (dx and dW);
// causal attention 4*B*H*D*T(T+1)/2 forward and twice that backward (the recomputed scores of
// the backward pass are not counted). Output: human-readable lines, then one JSON object as the
// last line. --amp 1: bf16 GEMM operands (the CLI's --amp). --experts E --topk K: a mixture-of-experts
// block (model/moe_ffn.h) of E experts of intermediate --inter, top-K routing; its FLOPs are the active
// ones (each token's K experts, and the router), e.g. a Qwen3-30B-A3B block:
//   block_bench --hidden 2048 --inter 768 --heads 32 --kv 4 --head_dim 128 --experts 128 --topk 8
#include <deque>
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "core/float_mode.h"
#include "core/malloc_policy.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/block_impl.h"
#include "bench_args.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

namespace {
using bench::arg;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void fill(Tensor& t, uint64_t seed, float scale, float offset = 0) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    p[i] = offset + scale * (float(s >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

double sgemm_peak_gflops(Context& ctx, int n) {
  Tensor a = Tensor::empty({n, n}, DType::F32, ctx), b = Tensor::empty({n, n}, DType::F32, ctx),
         c = Tensor::empty({n, n}, DType::F32, ctx);
  fill(a, 1, 1);
  fill(b, 2, 1);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    cpu::gemm(ctx, false, true, n, n, n, 1.f, a.f32(), n, b.f32(), n, 0.f, c.f32(), n);
    best = std::max(best, 2.0 * n * n * double(n) / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  ar::set_process_malloc_policy();  // as the CLI runs
  ar::flush_denormals();            // core/float_mode.h: on this thread and every later one
  try {
    ar::cpu::restart_for_openblas_core(argv);  // OpenBLAS's core as the CLI picks it
  } catch (const std::exception& e) {          // an unknown AR_CPU_ISA
    std::fprintf(stderr, "block_bench: %s\n", e.what());
    return 2;
  }
  if (argc > 1 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::printf("block_bench [--hidden 4096] [--inter 14336] [--heads 32] [--kv 8] [--head_dim 128] [--seq 512]\n"
                "            [--batch 1] [--iters 3] [--threads 0 (all)] [--peak_n 2048] [--amp 0]\n"
                "            [--experts 0 (dense)] [--topk 8]\n");
    return 0;
  }
  BlockDims d;
  d.C = arg(argc, argv, "--hidden", 4096);
  d.I = arg(argc, argv, "--inter", 14336);
  d.H = arg(argc, argv, "--heads", 32);
  d.Hkv = arg(argc, argv, "--kv", 8);
  d.D = arg(argc, argv, "--head_dim", d.C / d.H);
  d.eps = 1e-5;
  d.moe.E = arg(argc, argv, "--experts", 0);
  if (d.moe.E) {
    d.moe.K = arg(argc, argv, "--topk", 8);
    d.moe.I = d.I;
    d.moe.norm_topk = true;
  }
  const int64_t T = arg(argc, argv, "--seq", 512), B = arg(argc, argv, "--batch", 1), iters = arg(argc, argv, "--iters", 3);
  const int threads = int(arg(argc, argv, "--threads", 0)), peak_n = int(arg(argc, argv, "--peak_n", 2048));
  Context ctx(Device{}, threads);
  const int64_t N = B * T, QD = d.H * d.D, KD = d.Hkv * d.D;

  std::printf("block_bench: hidden %lld, inter %lld, heads %lld/%lld, head_dim %lld, batch %lld x seq %lld, %d threads\n",
              (long long)d.C, (long long)d.I, (long long)d.H, (long long)d.Hkv, (long long)d.D, (long long)B,
              (long long)T, ctx.threads());
  const double peak = sgemm_peak_gflops(ctx, peak_n);
  std::printf("SGEMM peak (%dx%dx%d, best of 4): %.1f GFLOP/s\n", peak_n, peak_n, peak_n, peak);

  struct W { const char* name; Shape shape; bool norm; };
  const std::vector<W> specs = {{"ln1", {d.C}, true},     {"wq", {QD, d.C}, false}, {"wk", {KD, d.C}, false},
                                {"wv", {KD, d.C}, false}, {"wo", {d.C, QD}, false}, {"ln2", {d.C}, true},
                                {"wg", {d.I, d.C}, false}, {"wu", {d.I, d.C}, false}, {"wd", {d.C, d.I}, false}};
  std::vector<Tensor> w, g;
  for (size_t i = 0; i < specs.size(); ++i) {
    w.push_back(Tensor::empty(specs[i].shape, DType::F32, ctx));
    fill(w.back(), 10 + i, specs[i].norm ? 0.1f : 1.f / std::sqrt(float(specs[i].shape.back())), specs[i].norm ? 1.f : 0.f);
    g.push_back(Tensor::zeros(specs[i].shape, DType::F32, ctx));
  }
  for (int64_t e = 0; d.moe.E && e <= d.moe.E; ++e) {  // MoE: the router, then each expert's gate, up, down
    const std::vector<Shape> shapes = e == 0 ? std::vector<Shape>{{d.moe.E, d.C}}
                                             : std::vector<Shape>{{d.I, d.C}, {d.I, d.C}, {d.C, d.I}};
    for (const Shape& sh : shapes) {
      w.push_back(Tensor::empty(sh, DType::F32, ctx));
      fill(w.back(), 100 + w.size(), 1.f / std::sqrt(float(sh.back())));
      g.push_back(Tensor::zeros(sh, DType::F32, ctx));
    }
  }
  const int64_t E = d.moe.E;
  auto block_ptrs = [E](auto& t, auto p) {  // ln1, q, k, v, o, ln2, gate, up, down [, router, experts]
    p.ln1 = t[0].f32(); p.wq = t[1].f32(); p.wk = t[2].f32(); p.wv = t[3].f32(); p.wo = t[4].f32();
    p.ln2 = t[5].f32(); p.wg = t[6].f32(); p.wu = t[7].f32(); p.wd = t[8].f32();
    if (E) p.router = t[9].f32();
    for (int64_t e = 0; e < E; ++e) {
      p.eg.push_back(t[size_t(10 + 3 * e)].f32());
      p.eu.push_back(t[size_t(11 + 3 * e)].f32());
      p.ed.push_back(t[size_t(12 + 3 * e)].f32());
    }
    return p;
  };
  const BlockPtrs<const float*> wp = block_ptrs(w, BlockPtrs<const float*>{});
  const BlockPtrs<float*> gp = block_ptrs(g, BlockPtrs<float*>{});
  Tensor x = Tensor::empty({N, d.C}, DType::F32, ctx), y = Tensor::empty({N, d.C}, DType::F32, ctx),
         dy = Tensor::empty({N, d.C}, DType::F32, ctx), dx = Tensor::empty({N, d.C}, DType::F32, ctx);
  fill(x, 3, 1.f);
  fill(dy, 4, 1e-3f);
  std::vector<float> cs(size_t(T * d.D / 2)), sn(cs.size());
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < d.D / 2; ++i) {
      double a = double(p) * std::pow(500000.0, -2.0 * double(i) / double(d.D));
      cs[size_t(p * d.D / 2 + i)] = float(std::cos(a));
      sn[size_t(p * d.D / 2 + i)] = float(std::sin(a));
    }
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[size_t(i)] = int32_t(i % T);
  BlockAux<float> aux{B, T, pos.data(), cs.data(), sn.data(), nullptr};
  // --amp 1: bf16 GEMM operands (the weights rounded once, as the tuning binds its QDQ weights).
  const bool amp = arg(argc, argv, "--amp", 0) != 0;
  if (amp && !cpu::bf16_gemm_supported()) {
    std::printf("block_bench: --amp 1 needs bf16 GEMMs: %s\n", cpu::bf16_support_summary().c_str());
    return 1;
  }
  cpu::Bf16Operands operands;
  std::vector<Tensor> wb;
  std::deque<cpu::PackedB> fwd_pack, dx_pack;  // packed as the tuning packs its QDQ weights
  for (size_t i = 0; amp && i < specs.size(); ++i) {
    if (specs[i].norm) continue;
    const int64_t out = w[i].dim(0), in = w[i].dim(1);
    wb.push_back(w[i].to(DType::BF16, ctx));
    fwd_pack.emplace_back().pack(ctx, wb.back().data<uint16_t>(), out, in, true);
    dx_pack.emplace_back().pack(ctx, wb.back().data<uint16_t>(), out, in, false);
    operands.bind(w[i].f32(), {wb.back().data<uint16_t>(), &fwd_pack.back(), &dx_pack.back()});
  }
  cpu::CpuOps ops{ctx, amp ? &operands : nullptr};
  BlockRunner<cpu::CpuOps> run(ops, d);

  // Parameters each token meets: attention, and the dense MLP or its K experts and the router.
  double params = double(QD * d.C * 2 + KD * d.C * 2) +
                  (E ? double(d.moe.K * 3 * d.I * d.C + E * d.C) : double(3 * d.I * d.C));
  double attn = 4.0 * double(B * d.H * d.D) * double(T) * double(T + 1) / 2.0;
  double flop_fwd = 2.0 * double(N) * params + attn, flop_bwd = 4.0 * double(N) * params + 2 * attn;

  double t_fwd = 0, t_bwd = 0;
  for (int64_t it = -1; it < iters; ++it) {  // iteration -1 warms caches and the allocator
    BlockRunner<cpu::CpuOps>::Cache cache;
    auto t0 = Clock::now();
    run.forward(wp, aux, x.f32(), y.f32(), cache);
    double tf = seconds_since(t0);
    t0 = Clock::now();
    run.backward(wp, aux, cache, dy.f32(), dx.f32(), gp);
    double tb = seconds_since(t0);
    if (it >= 0) { t_fwd += tf; t_bwd += tb; }
    std::printf("iter %lld: forward %.3f s, backward %.3f s%s\n", (long long)it, tf, tb, it < 0 ? " (warm-up)" : "");
  }
  t_fwd /= double(iters);
  t_bwd /= double(iters);
  const double total = t_fwd + t_bwd, gflops = (flop_fwd + flop_bwd) / total / 1e9;
  const double tokens_per_s = double(N) / total, rss = peak_rss_mb();
  double weight_bytes = 0;
  for (const Tensor& t : w) weight_bytes += double(t.nbytes());
  std::printf("forward %.1f GFLOP/s, backward %.1f GFLOP/s, fwd+bwd %.1f GFLOP/s = %.1f%% of SGEMM peak; "
              "%.0f tokens/s; block weights %.0f MiB; peak RSS %.0f MiB\n",
              flop_fwd / t_fwd / 1e9, flop_bwd / t_bwd / 1e9, gflops, 100 * gflops / peak, tokens_per_s,
              weight_bytes / 1048576.0, rss);
  std::printf("{\"bench\":\"block_fwd_bwd\",\"hidden\":%lld,\"intermediate\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
              "\"seq\":%lld,\"batch\":%lld,\"threads\":%d,\"fwd_s\":%.4f,\"bwd_s\":%.4f,\"tokens_per_s\":%.2f,"
              "\"gflops\":%.2f,\"fwd_gflops\":%.2f,\"bwd_gflops\":%.2f,\"sgemm_peak_gflops\":%.2f,\"ratio\":%.4f,"
              "\"peak_rss_mb\":%.1f,\"amp\":%s,\"experts\":%lld,\"topk\":%lld}\n",
              (long long)d.C, (long long)d.I, (long long)d.H, (long long)d.Hkv, (long long)T, (long long)B,
              ctx.threads(), t_fwd, t_bwd, tokens_per_s, gflops, flop_fwd / t_fwd / 1e9, flop_bwd / t_bwd / 1e9, peak,
              gflops / peak, rss, amp ? "true" : "false", (long long)E, (long long)d.moe.K);
  return 0;
}
