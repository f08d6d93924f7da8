// The SignRound tuning iteration on one GPU (quant/cuda/signround_cuda.h), against cuBLASLt's GEMM rate
// (fp32, or bf16 operands with --amp 1) on the block's own Linear shapes measured in the same run. Default:
// the Llama-3-8B block at batch 8 x 2048 (the shape), W4G128, 3 iterations after a warm-up one.
//   tune_bench_cuda [--hidden 4096] [--inter 14336] [--heads 32] [--kv 8] [--head_dim 128] [--seq 2048]
//                   [--bs 8] [--iters 3] [--amp 1]
// Prints the steady iteration time with its phases, the model FLOP rate as a share of that GEMM rate,
// and the allocator's peak device memory against the block's weight bytes. Exits 2 without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_block.h"
#include "kernels/cuda/gemm.h"
#include "quant/cuda/signround_cuda.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

namespace {

// GFLOP/s of the block's forward Linears at its token count (cuBLASLt, best of 3 after a warm-up), with fp32
// operands or, under --amp, bf16 operands (fp32 accumulation): the limit the tuning iteration is held to.
double linear_rate(cuda::DeviceContext& dev, const BlockDims& d, int64_t rows, cuda::GemmType type) {
  const int64_t QD = d.H * d.D, KD = d.Hkv * d.D;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{d.C, QD}, {d.C, KD}, {d.C, KD}, {QD, d.C},
                                                           {d.C, d.I}, {d.C, d.I}, {d.I, d.C}};
  int64_t max_in = 0, max_out = 0, max_w = 0;
  double flop = 0;
  for (auto [in, out] : shapes) {
    max_in = std::max(max_in, in);
    max_out = std::max(max_out, out);
    max_w = std::max(max_w, in * out);
    flop += 2.0 * double(rows) * double(in) * double(out);
  }
  // fp32-sized buffers serve both types; 0x3f filled: finite, nonzero operands (a product of zeros is
  // faster than real data).
  auto x = dev.alloc<float>(rows * max_in), W = dev.alloc<float>(max_w), y = dev.alloc<float>(rows * max_out);
  cudaMemsetAsync(x.data(), 0x3f, x.bytes(), dev.stream());
  cudaMemsetAsync(W.data(), 0x3f, W.bytes(), dev.stream());
  double best = 1e300;
  for (int rep = 0; rep < 4; ++rep) {
    dev.synchronize();
    const auto t0 = Clock::now();
    for (auto [in, out] : shapes) cuda::linear_fwd(dev, type, x.data(), W.data(), y.data(), rows, in, out);
    dev.synchronize();
    if (rep > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return flop / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::fprintf(stderr, "tune_bench_cuda: no CUDA device (%s)\n", why.c_str());
    return 2;
  }
  Context host(Device{}, 0);
  bench::BenchBlock blk = bench::make_block(host, argc, argv, 4096, 14336, 32, 8, 2048, 128);
  const int iters = int(bench::arg(argc, argv, "--iters", 3));
  cuda::DeviceContext dev(0);
  quant::SignRoundOptions o;
  o.batch_size = blk.n;
  o.use_best_mse = false;
  o.deterministic = false;
  o.iters = iters + 1;
  o.amp = bench::arg(argc, argv, "--amp", 0) != 0;
  const double gemm = linear_rate(dev, blk.d, blk.n * blk.T, o.amp ? cuda::GemmType::BF16 : cuda::GemmType::F32);
  std::vector<double> walls;
  auto last = Clock::now();
  o.progress = [&](int, int, double, double) {
    dev.synchronize();
    const auto now = Clock::now();
    walls.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  };
  BlockWeights w = quant::clone_block(blk.w, host);
  const auto r = quant::signround_tune_block_cuda(dev, host, blk.d, w, quant::QuantFormat(4, 128, true), blk.aux(),
                                                  blk.x, blk.y, blk.mask, o);
  std::vector<double> steady(walls.begin() + 1, walls.end());
  std::sort(steady.begin(), steady.end());
  const double it_s = steady[steady.size() / 2], gf = blk.flops() / it_s / 1e9;
  const auto& p = r.phases;
  const double n = double(o.iters);
  std::printf("tune_bench_cuda: hidden %lld, inter %lld, heads %lld/%lld, head_dim %lld, %lld x %lld tokens, W4G128 %s\n",
              (long long)blk.d.C, (long long)blk.d.I, (long long)blk.d.H, (long long)blk.d.Hkv, (long long)blk.d.D,
              (long long)blk.n, (long long)blk.T, o.amp ? "amp (bf16 GEMM operands)" : "fp32");
  std::printf("iteration %.3f s (steady median; the first %.3f s): qdq %.3f + forward %.3f + backward %.3f + step %.3f "
              "(means)\n",
              it_s, walls.at(0), p.qdq / n, p.forward / n, p.backward / n, p.step / n);
  std::printf("%.1f GFLOP/s = %.1f%% of the same-run cuBLASLt %s rate on the block's Linears (%.1f GFLOP/s)\n", gf,
              100 * gf / gemm, o.amp ? "bf16" : "fp32", gemm);
  std::printf("peak device memory %.0f MiB (the block's weights: %.0f MiB)\n",
              double(dev.allocator().peak()) / (1 << 20), double(blk.w.bytes()) / (1 << 20));
  std::printf("cuBLASLt plans: %lld built, %lld reused\n", (long long)dev.gemm_plans().misses(),
              (long long)dev.gemm_plans().hits());
  std::printf("{\"bench\":\"signround_iteration_cuda\",\"iter_s\":%.4f,\"gflops\":%.2f,\"amp\":%s,\"gemm_gflops\":%.2f,"
              "\"peak_device_mib\":%.1f,\"gemm_plans_built\":%lld}\n",
              it_s, gf, o.amp ? "true" : "false", gemm, double(dev.allocator().peak()) / (1 << 20),
              (long long)dev.gemm_plans().misses());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tune_bench_cuda: %s\n", e.what());
  return 1;
}
