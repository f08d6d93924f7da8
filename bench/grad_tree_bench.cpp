// The deterministic tuning tree's weight gradient of one MoE expert weight under --amp: `--leaves`
// one-sample leaves of `--rows` routed rows each, summed by quant::leaf_tree_steps' tree, at the
// experts' shapes ([inter, hidden] for gate and up, [hidden, inter] for down), against the bf16 limit
// measured in the same run (twice the AVX-512 FMA peak, bench/peaks.h):
//  - "tree_one_pass": cpu::weight_grad_tree_bf16, every leaf's chain and the tree's sums per 8 x 32
//    output tile, the root stored once (what the tuner runs at the avx512_bf16 level);
//  - "dnnl_per_leaf": one oneDNN bf16 GEMM per leaf on buffers of the weight's size, pairs accumulated
//    and pending sums added by the GEMM's post-ops (what it ran before, and still runs with AMX);
//  - the same two in fp32 ("f32_tree_one_pass": cpu::weight_grad_tree_f32, 6 x 16 AVX2 FMA tiles;
//    "f32_per_leaf": cpu::gemm per leaf, the project's fp32 GEMM), against the same limit: an fp32
//    rate reads against the FMA peak, half of it.
// The tuner runs each expert on one thread (CpuOps::for_each_group), so one thread is the figure that
// counts; all threads are printed too. Output: one JSON line per (shape, path, threads).
//   grad_tree_bench [--hidden 2048] [--inter 768] [--leaves 8] [--rows 32] [--reps 5] [--threads T]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "core/float_mode.h"
#include "core/malloc_policy.h"
#include "kernels/cpu/bf16_ops.h"
#include "bench_args.h"
#include "peaks.h"
#include "quant/expert_grad_tree.h"

using namespace ar;

namespace {
using bench::arg;
using bench::best_time;

void f32_per_leaf(Context& ctx, const std::vector<cpu::GradLeafF32>& leaves, const std::vector<cpu::GradTreeStep>& steps,
                  std::vector<std::vector<float>>& bufs, int64_t out, int64_t in) {
  for (size_t l = 0; l < steps.size(); ++l) {
    std::vector<const float*> adds;
    for (int k : steps[l].adds) adds.push_back(bufs[size_t(k)].data());
    cpu::gemm(ctx, true, false, out, in, leaves[l].rows, 1.f, leaves[l].dy, out, leaves[l].x, in,
              steps[l].accumulate ? 1.f : 0.f, bufs[size_t(steps[l].dst)].data(), in, adds);
  }
}

// The same tree with one oneDNN GEMM per leaf: buffer 0 is dW, the others scratch of its size.
void dnnl_per_leaf(Context& ctx, const std::vector<cpu::GradLeafBf16>& leaves,
                   const std::vector<cpu::GradTreeStep>& steps, std::vector<std::vector<float>>& bufs, int64_t out,
                   int64_t in) {
  for (size_t l = 0; l < steps.size(); ++l) {
    std::vector<const float*> adds;
    for (int k : steps[l].adds) adds.push_back(bufs[size_t(k)].data());
    cpu::gemm_bf16(ctx, true, false, out, in, leaves[l].rows, 1.f, leaves[l].dy, out, leaves[l].x, in,
                   steps[l].accumulate ? 1.f : 0.f, bufs[size_t(steps[l].dst)].data(), in, adds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ar::set_process_malloc_policy();
  ar::flush_denormals();
  const int64_t H = arg(argc, argv, "--hidden", 2048), I = arg(argc, argv, "--inter", 768),
                L = arg(argc, argv, "--leaves", 8), R = arg(argc, argv, "--rows", 32);
  const int reps = int(arg(argc, argv, "--reps", 5)), only = int(arg(argc, argv, "--threads", 0));
  if (!cpu::gemm_rows_bf16_supported() || !cpu::bf16_gemm_supported()) {
    std::printf("grad_tree_bench: needs AVX512_BF16 at this level (%s)\n", cpu::isa_name(cpu::kernel_isa()));
    return 1;
  }
  const std::vector<cpu::GradTreeStep> steps = quant::leaf_tree_steps(L);
  int buffers = 1;
  for (const auto& s : steps) {
    buffers = std::max(buffers, s.dst + 1);
    for (int k : s.adds) buffers = std::max(buffers, k + 1);
  }
  std::vector<int> threads = {1};
  if (only > 0) threads = {only};
  else if (Context().threads() > 1) threads.push_back(Context().threads());
  for (int t : threads) {
    Context ctx(Device{}, t);
    const double bf16_limit = 2 * bench::fp32_peak_gflops(ctx);
    for (auto [out, in] : {std::pair{I, H}, std::pair{H, I}}) {
      auto values = [](int64_t n, int64_t seed, int64_t mul, int64_t mod) {
        std::vector<uint16_t> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f32_to_bf16(float((i + seed) * mul % mod - mod / 2) * 1e-3f);
        return v;
      };
      std::vector<std::vector<uint16_t>> dy, x;
      std::vector<cpu::GradLeafBf16> leaves;
      for (int64_t l = 0; l < L; ++l) {
        dy.push_back(values(R * out, l, 7919, 1999));
        x.push_back(values(R * in, l, 104729, 2003));
        leaves.push_back({dy.back().data(), x.back().data(), R});
      }
      std::vector<std::vector<float>> bufs(static_cast<size_t>(buffers), std::vector<float>(static_cast<size_t>(out * in)));
      const double flop = 2.0 * double(out) * double(in) * double(R) * double(L);
      auto report = [&](const char* path, double sec) {
        const double gf = flop / sec / 1e9;
        std::printf("{\"bench\":\"grad_tree\",\"out\":%lld,\"in\":%lld,\"leaves\":%lld,\"rows\":%lld,\"threads\":%d,"
                    "\"path\":\"%s\",\"ms\":%.3f,\"gflops\":%.1f,\"of_bf16_limit\":%.3f,\"bf16_limit_gflops\":%.1f}\n",
                    (long long)out, (long long)in, (long long)L, (long long)R, t, path, sec * 1e3, gf, gf / bf16_limit,
                    bf16_limit);
        std::fflush(stdout);
      };
      report("tree_one_pass", best_time(reps, [&] {
               cpu::weight_grad_tree_bf16(ctx, leaves, steps, {}, out, in, bufs[0].data());
             }));
      report("dnnl_per_leaf", best_time(reps, [&] { dnnl_per_leaf(ctx, leaves, steps, bufs, out, in); }));
      std::vector<std::vector<float>> dyf, xf;
      std::vector<cpu::GradLeafF32> lf;
      for (int64_t l = 0; l < L; ++l) {
        dyf.emplace_back(dy[size_t(l)].size());
        xf.emplace_back(x[size_t(l)].size());
        for (size_t i = 0; i < dyf.back().size(); ++i) dyf.back()[i] = bf16_to_f32(dy[size_t(l)][i]);
        for (size_t i = 0; i < xf.back().size(); ++i) xf.back()[i] = bf16_to_f32(x[size_t(l)][i]);
        lf.push_back({dyf.back().data(), xf.back().data(), R});
      }
      report("f32_tree_one_pass", best_time(reps, [&] {
               cpu::weight_grad_tree_f32(ctx, lf, steps, {}, out, in, bufs[0].data());
             }));
      report("f32_per_leaf", best_time(reps, [&] { f32_per_leaf(ctx, lf, steps, bufs, out, in); }));
    }
  }
  return 0;
}
