// SignRound tuning throughput for one decoder block: per-iteration time split into phases (QDQ of
// all Linears, block forward, block backward, the step: QDQ backward + sign-SGD) and achieved GFLOP/s
// against the machine's limits measured in the same run: the fp32 FMA peak at the process's ISA level
// (AVX-512, or AVX2 under AR_CPU_ISA=avx2 / on a CPU without AVX-512), the bf16 limit
// (twice that), and the best fp32 and bf16 GEMM rates (2048^3) of the kernels the tuning uses.
// Default shape: a Llama-3.2-1B block (hidden 2048, intermediate 8192, 32 heads, 8 KV heads, head_dim
// 64), batch 8 x seqlen 512, W4G128 sym, deterministic (per-sample leaves, the CLI's default).
// FLOPs: model FLOPs of forward (2 N params + causal attention) and backward (4 N params + 2x attention);
// the QDQ and step phases are counted as overhead, not FLOPs. One JSON line per precision.
// Iteration 0 of a block also first-touches the tuning state (weight-gradient tree, QDQ weights): the
// steady rate is the median of the later iterations.
//   tune_bench [--amp] [--both] [--hidden 2048] [--inter 8192] [--heads 32] [--kv 8] [--head_dim 64]
//              [--seq 512] [--bs 8] [--iters 3] [--threads 0] [--deterministic 1] [--experts 0] [--topk 8]
//              [--scheme w4g128|mxfp4|mxfp8|nvfp4|fp8|fp8_static]   (the scheme tuned; default w4g128;
//              fp8_static: W8A8, the activations fake-quantized in the tuning forward)
//              [--estimate_only [--nsamples N]]  and the block's shape flags of bench_block.h (MLA, sigmoid routing, shared
//              experts, partial RoPE): DeepSeek-V3's and GLM-4.5-Air's blocks in docs/benchmarks.md
// --amp: the bf16 mixed-precision path only; --both: fp32 then amp, and the ratio of their iteration times.
// Time: the start summary's FLOP-model price of an iteration beside the measured one (the CLI prices a
// SignRound run by a measured leaf of it; the FLOP model is its fallback).
// Memory: the start summary's estimate for tuning this block (pipeline/run_summary.h, with the memory
// the process holds before the block) beside the measured peak RSS; the tuning runs on the block itself,
// as the pipeline's does. --estimate_only prints the estimate without allocating the block (shapes too
// large for this machine).

#include <algorithm>
#include <chrono>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench_block.h"
#include "core/context.h"
#include "core/float_mode.h"
#include "core/malloc_policy.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "model/block_tensors.h"
#include "model/loader.h"
#include "peaks.h"
#include "pipeline/quantize.h"
#include "pipeline/run_estimate.h"
#include "pipeline/run_summary.h"
#include "quant/signround.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

using bench::arg;
using bench::rnd;

namespace {
const char* str_arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

// --scheme: the weight format tuned (AutoRound's presets; the float ones weight-only).
quant::QuantFormat scheme_format(const std::string& s) {
  auto fp = [](int bits, int64_t block, quant::FpFamily fam) {
    quant::QuantFormat f(bits, block, true);
    f.fp = fam;
    return f;
  };
  if (s == "w4g128") return quant::QuantFormat(4, 128, true);
  if (s == "mxfp4") return fp(4, 32, quant::FpFamily::Mx);
  if (s == "mxfp8") return fp(8, 32, quant::FpFamily::Mx);
  if (s == "nvfp4") return fp(4, 16, quant::FpFamily::Nvfp4);
  if (s == "fp8") return fp(8, -1, quant::FpFamily::Fp8);
  if (s == "fp8_static") {
    quant::QuantFormat f = fp(8, -1, quant::FpFamily::Fp8);
    f.act_bits = 8;
    return f;
  }
  std::fprintf(stderr, "tune_bench: --scheme %s: w4g128, mxfp4, mxfp8, nvfp4, fp8 or fp8_static\n", s.c_str());
  std::exit(2);
}

bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

// Best of 3 GEMMs 2048^3 (x W^T layout), GFLOP/s.
double gemm_rate(Context& ctx, bool bf16) {
  const int64_t m = 2048;
  Tensor a = rnd(ctx, {m, m}, 1, 1), b = rnd(ctx, {m, m}, 2, 1), c = Tensor::empty({m, m}, DType::F32, ctx);
  Tensor ah = a.to(DType::BF16, ctx), bh = b.to(DType::BF16, ctx);
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    if (bf16)
      cpu::gemm_bf16(ctx, false, true, m, m, m, 1.f, ah.data<uint16_t>(), m, bh.data<uint16_t>(), m, 0.f, c.f32(), m);
    else
      cpu::gemm(ctx, false, true, m, m, m, 1.f, a.f32(), m, b.f32(), m, 0.f, c.f32(), m);
    best = std::max(best, 2.0 * double(m * m * m) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  return best;
}

struct Run {
  double iter_s = 0, first_s = 0, steady_s = 0;  // mean; iteration 0 (first touch of the tuning state); median of the rest
  quant::TunePhases ph;
};

Run tune(Context& ctx, bench::BenchBlock& blk, const quant::QuantFormat& fmt, bool amp, int iters, bool deterministic) {
  BlockAux<float> aux = blk.aux();
  quant::SignRoundOptions o;
  o.batch_size = blk.n;
  o.amp = amp;
  o.deterministic = deterministic;
  o.use_best_mse = false;  // every iteration whole: with it, the last one would measure its loss only
  if (fmt.act_static()) {  // every Linear's maximum: the block input's (what matters here is the work)
    float amax = 0;
    for (int64_t i = 0; i < blk.x.numel(); ++i) amax = std::max(amax, std::fabs(blk.x.f32()[i]));
    o.fix_params = [amax](Context&, quant::TunedLinear& L) { L.act_max = amax; };
  }
  // On the block itself, as the pipeline tunes its loaded block (a copy would add one block to the peak);
  // the timed run starts from the warm-up's rounding, which costs the same.
  o.iters = 1;  // warm-up: allocator, primitive caches
  quant::signround_tune_block(ctx, blk.d, blk.w, fmt, aux, blk.x, blk.y, blk.mask, o);
  o.iters = iters;
  BlockWeights& w = blk.w;
  std::vector<double> walls;
  auto t0 = Clock::now(), last = t0;
  o.progress = [&](int, int, double, double) {
    const auto now = Clock::now();
    walls.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  };
  quant::BlockTuneResult r = quant::signround_tune_block(ctx, blk.d, w, fmt, aux, blk.x, blk.y, blk.mask, o);
  Run run{std::chrono::duration<double>(Clock::now() - t0).count() / iters, walls.at(0), walls.at(0), r.phases};
  if (walls.size() > 1) {
    std::vector<double> rest(walls.begin() + 1, walls.end());
    std::sort(rest.begin(), rest.end());
    run.steady_s = rest[rest.size() / 2];
  }
  return run;
}
// The start summary's peak memory for tuning this block alone (one layer of its shapes).
// `samples` calibration samples of T tokens, tuned in batches of `bs`.
PeakMemory estimate(const BlockDims& d, int64_t samples, int64_t bs, int64_t T, const quant::QuantFormat& fmt, bool amp,
                    int iters, bool deterministic, double process_bytes) {
  QuantizeOptions o;
  o.fmt = fmt;
  o.tune.iters = iters;
  o.tune.amp = amp;
  o.tune.batch_size = int(bs);
  o.tune.gradient_accumulate_steps = 1;
  o.tune.deterministic = deterministic;
  return estimate_peak_memory(block_config(d), o, samples, T, process_bytes);
}

// The start summary's FLOP-model price of one tuning iteration (pipeline/run_estimate.h: the block's
// products at the block-shaped GEMM rate measured now, times the share a whole iteration reaches, and its
// attention scores at the measured exp rate), for this block and batch.
double estimated_iteration_s(Context& ctx, const BlockDims& d, int64_t n, int64_t T, bool amp) {
  QuantizeOptions o;
  o.tune.iters = 1;
  o.tune.batch_size = int(n);
  o.tune.gradient_accumulate_steps = 1;
  const ModelConfig cfg = block_config(d);
  RunWork w = run_work(cfg, o, n, T, 1);
  w.gflop = w.tune_gflop;  // the iteration alone, without the calibration passes
  w.score_giga = w.tune_score_giga;
  w.pass_samples = 0;
  return estimate_seconds(w, measure_rates(ctx, cfg, amp));
}

void print_estimate(const char* what, const PeakMemory& m) {
  std::printf("%s: %.0f MiB = process %.0f + activations %.0f + block and tuning state %.0f + tuning caches %.0f + "
              "idle cached %.0f\n", what, m.total() / 1048576, m.process / 1048576, m.activations / 1048576,
              m.block / 1048576, m.caches / 1048576, m.slack / 1048576);
}
}  // namespace

int main(int argc, char** argv) {
  if (flag(argc, argv, "--help") || flag(argc, argv, "-h")) {  // the usage is this file's header
    std::printf("tune_bench: SignRound iteration time and memory of one decoder block (bench/tune_bench.cpp's\n"
                "header lists the flags; the block's shape flags: bench/bench_block.h; examples: docs/benchmarks.md)\n"
                "  tune_bench [--amp | --both] [--hidden --inter --heads --kv --head_dim --seq --bs --iters --threads]\n"
                "             [--experts E --topk K [--shared N] [--routing sigmoid ...] [--gpt_oss 1 [--window W]]]\n"
                "             [--gemma3 1 [--window W]] [--qwen3_next 1 [--deltanet 1 [--lin_kh --lin_vh --lin_dk --lin_dv]]]\n"
                "             [--kv_lora R ...] [--scheme w4g128|mxfp4|mxfp8|nvfp4|fp8|fp8_static]\n"
                "             [--estimate_only [--nsamples N]]\n");
    return 0;
  }
  ar::set_process_malloc_policy();  // as the CLI runs
  ar::flush_denormals();            // core/float_mode.h: on this thread and every later one
  try {
    cpu::restart_for_openblas_core(argv);  // OpenBLAS's core as the CLI picks it
  } catch (const std::exception& e) {      // an unknown AR_CPU_ISA
    std::fprintf(stderr, "tune_bench: %s\n", e.what());
    return 2;
  }
  Context ctx(Device{}, int(arg(argc, argv, "--threads", 0)));
  const bool both = flag(argc, argv, "--both"), amp_only = flag(argc, argv, "--amp");
  const bool deterministic = arg(argc, argv, "--deterministic", 1) != 0;
  const int iters = int(arg(argc, argv, "--iters", 3));
  const std::string scheme = str_arg(argc, argv, "--scheme", "w4g128");
  const quant::QuantFormat fmt = scheme_format(scheme);
  if ((both || amp_only) && !cpu::bf16_gemm_supported()) {
    std::printf("tune_bench: --amp needs bf16 GEMMs: %s\n", cpu::bf16_support_summary().c_str());
    return 1;
  }
  if (flag(argc, argv, "--estimate_only")) {
    const BlockDims d = bench::bench_dims(argc, argv, 2048, 8192, 32, 8, 64);
    const int64_t n = arg(argc, argv, "--bs", 8), T = arg(argc, argv, "--seq", 512);
    const int64_t samples = arg(argc, argv, "--nsamples", n);  // a whole run's calibration (AutoRound: 128)
    for (bool amp : {false, true})
      if (amp ? (both || amp_only) : !amp_only)
        print_estimate(amp ? "estimated peak memory, amp" : "estimated peak memory, fp32",
                       estimate(d, samples, n, T, fmt, amp, iters, deterministic, peak_rss_mb() * 1048576));
    return 0;
  }
  const bool has_bf16 = cpu::cpu_isa().avx512_bf16;
  const double fp32_peak = bench::fp32_peak_gflops(ctx), dp_loop = bench::dpbf16_peak_gflops(ctx, has_bf16);
  const double bf16_limit = 2 * fp32_peak;
  const double sgemm = gemm_rate(ctx, false), bgemm = cpu::bf16_gemm_supported() ? gemm_rate(ctx, true) : 0.0;
  const double process_bytes = peak_rss_mb() * 1048576;  // before the block: libraries, threads, the probes
  bench::BenchBlock blk = bench::make_block(ctx, argc, argv, 2048, 8192, 32, 8, 512);
  const BlockDims& d = blk.d;
  std::printf("tune_bench: %s, hidden %lld, inter %lld, heads %lld/%lld, head_dim %lld, %lld x %lld tokens, %d threads, %s%s\n",
              scheme.c_str(), (long long)d.C, (long long)d.I, (long long)d.H, (long long)d.Hkv, (long long)d.D,
              (long long)blk.n, (long long)blk.T, ctx.threads(), deterministic ? "deterministic" : "micro-batch leaves",
              d.is_moe() ? (", " + std::to_string(d.moe.E) + " experts, top-" + std::to_string(d.moe.K) +
                            " (FLOPs of the active weights)").c_str() : "");
  std::printf("%s\n", cpu::isa_summary().c_str());
  std::printf("limits: fp32 FMA peak (%s) %.1f GFLOP/s, bf16 limit %.1f (VDPBF16PS loop %.1f); GEMM 2048^3: fp32 %.1f (%s), "
              "bf16 %.1f (%s)\n",
              bench::fp32_peak_isa(), fp32_peak, bf16_limit, dp_loop, sgemm, cpu::dnnl_matmul_impl(false, false, true, 2048, 2048, 2048).c_str(),
              bgemm, cpu::bf16_gemm_supported() ? cpu::dnnl_matmul_impl(true, false, true, 2048, 2048, 2048).c_str() : "-");
  const double flops = blk.flops();
  double fp32_iter = 0;
  for (bool amp : {false, true}) {
    if (amp ? !(both || amp_only) : amp_only) continue;
    const PeakMemory est = estimate(d, blk.n, blk.n, blk.T, fmt, amp, iters, deterministic, process_bytes);
    const Run r = tune(ctx, blk, fmt, amp, iters, deterministic);
    const auto& p = r.ph;
    const double q = p.qdq / iters, f = p.forward / iters, b = p.backward / iters, s = p.step / iters;
    const double gf = flops / r.iter_s / 1e9;
    if (!amp) fp32_iter = r.steady_s;
    std::printf("%s: %.3f s per iteration = qdq %.3f + forward %.3f + backward %.3f + step %.3f (+ %.3f other); "
                "iteration 0 %.3f s, steady (median of the others) %.3f s\n",
                amp ? "amp (bf16 GEMMs)" : "fp32", r.iter_s, q, f, b, s, r.iter_s - q - f - b - s, r.first_s, r.steady_s);
    const double gs = flops / r.steady_s / 1e9;
    std::printf("  steady: %.1f GFLOP/s = %.1f%% of the bf16 limit, %.1f%% of the fp32 peak\n", gs,
                100 * gs / bf16_limit, 100 * gs / fp32_peak);
    std::printf("  %.1f GFLOP/s = %.1f%% of the bf16 limit, %.1f%% of the fp32 peak, %.1f%% of the %s GEMM rate; "
                "peak RSS %.0f MiB; oneDNN unit primitives kept %zu\n",
                gf, 100 * gf / bf16_limit, 100 * gf / fp32_peak, 100 * gf / (amp ? bgemm : sgemm),
                amp ? "bf16" : "fp32", peak_rss_mb(), cpu::dnnl_cached_units(ctx));
    const double est_iter = estimated_iteration_s(ctx, d, blk.n, blk.T, amp);
    std::printf("  estimated iteration (the start summary's FLOP model) %.3f s; steady = %.3f x it\n", est_iter,
                r.steady_s / est_iter);
    print_estimate("  estimated peak memory", est);
    std::printf("  measured peak RSS %.0f MiB = %.3f x the estimate\n", peak_rss_mb(), peak_rss_mb() * 1048576 / est.total());
    std::printf("{\"bench\":\"signround_iteration\",\"scheme\":\"%s\",\"precision\":\"%s\",\"tokens\":%lld,\"iter_s\":%.4f,"
                "\"first_iter_s\":%.4f,\"steady_iter_s\":%.4f,\"steady_gflops\":%.2f,\"qdq_s\":%.4f,\"fwd_s\":%.4f,\"bwd_s\":%.4f,\"step_s\":%.4f,\"gflops\":%.2f,"
                "\"fp32_peak_gflops\":%.2f,\"bf16_limit_gflops\":%.2f,\"gemm_fp32_gflops\":%.2f,"
                "\"gemm_bf16_gflops\":%.2f,\"of_bf16_limit\":%.4f,\"of_fp32_peak\":%.4f,\"peak_rss_mb\":%.1f,\"estimated_peak_mb\":%.1f,"
                "\"estimated_iter_s\":%.4f%s}\n",
                scheme.c_str(), amp ? "amp" : "fp32", (long long)(blk.n * blk.T), r.iter_s, r.first_s, r.steady_s, gs, q, f, b, s, gf, fp32_peak, bf16_limit, sgemm,
                bgemm, gf / bf16_limit, gf / fp32_peak, peak_rss_mb(), est.total() / 1048576, est_iter,
                amp && fp32_iter > 0 ? (",\"steady_speedup_vs_fp32\":" + std::to_string(fp32_iter / r.steady_s)).c_str() : "");
  }
  return 0;
}
