#include "pipeline/run_estimate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar {

namespace {
constexpr double kIterationShareOfGemm = 0.75;  // whole tuning iteration vs the best GEMM (tune_bench)
}

double run_gflop(const ModelConfig& c, const QuantizeOptions& opt, int64_t n, int64_t T) {
  const double C = double(c.hidden_size), q = double(c.num_heads * c.head_dim), kv = double(c.num_kv_heads * c.head_dim);
  const double linear = C * q + 2 * C * kv + q * C + 3 * C * double(c.intermediate_size);
  const double per_token = 2 * linear + 4 * q * double(T) / 2;  // Linears, then QK^T and PV (causal half)
  const double pass = 2.0 * double(n) * double(T) * per_token;  // FP targets and the q-chain
  double tune = 0;
  if (opt.tune.iters > 0) {
    const int64_t batch = std::min<int64_t>(n, opt.tune.batch_size * std::max(1, opt.tune.gradient_accumulate_steps));
    tune = double(opt.tune.iters) * 3.0 * double(batch) * double(T) * per_token;
  }
  return double(c.num_layers) * (pass + tune) / 1e9;
}

double measure_gemm_gflops(Context& ctx, const ModelConfig& cfg, bool amp) {
  const int64_t M = 512, K = std::clamp<int64_t>(cfg.hidden_size, 64, 2048),
                N = std::clamp<int64_t>(cfg.intermediate_size, 64, 4096);
  std::vector<float> a(size_t(M * K), 0.01f), b(size_t(K * N), 0.02f), out(size_t(M * N));
  std::vector<uint16_t> ab(a.size(), f32_to_bf16(0.01f)), bb(b.size(), f32_to_bf16(0.02f));
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms caches and kernel selection
    const auto t0 = std::chrono::steady_clock::now();
    if (amp) cpu::gemm_bf16(ctx, false, false, M, N, K, 1.f, ab.data(), K, bb.data(), N, 0.f, out.data(), N);
    else cpu::gemm(ctx, false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, out.data(), N);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  return 2.0 * double(M) * double(N) * double(K) / best / 1e9;
}

std::string human_duration(double s) {
  char b[48];
  if (s >= 3600) std::snprintf(b, sizeof b, "%d h %02d min", int(s / 3600), int(s / 60) % 60);
  else if (s >= 60) std::snprintf(b, sizeof b, "%d min %02d s", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%.0f s", s);
  return b;
}

std::string time_estimate_line(double gflop, double gemm_gflops, bool amp) {
  const double rate = gemm_gflops * kIterationShareOfGemm;
  char b[256];
  std::snprintf(b, sizeof b,
                "estimated time: ~%s (%.0f GFLOP of matrix products at ~%.0f GFLOP/s: this machine's %s GEMM "
                "measured now at %.0f GFLOP/s; the run ETA follows the first iterations)",
                human_duration(gflop / rate).c_str(), gflop, rate, amp ? "bf16" : "fp32", gemm_gflops);
  return b;
}

}  // namespace ar
