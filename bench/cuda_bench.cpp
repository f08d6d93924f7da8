// The CUDA backend's kernels on a GPU, against limits measured in the same run: cuBLASLt's bf16 and fp32
// GEMM rates on a large square product (the peak the tuning iteration is judged against), the Linear
// products of a Llama-3-8B-shaped block at batch x seq rows (fwd, dx, dW for q, k, v, o, gate, up, down),
// and the integer QDQ forward + backward and the sign step over that block's weights (W4G128), as
// bandwidth against a device-to-device copy; causal attention at rows / seq sequences (the tiled kernels
// against the fp32 rate, and the unit kernels' forward); RMSNorm with its weight gradient. Prints a table,
// and JSON with --json PATH. Exits 2 with one line when no GPU is visible.
//   cuda_bench [--rows 16384] [--seq 2048] [--hidden 4096] [--inter 14336] [--heads 32] [--kv 8]
//              [--head_dim 128] [--reps 5] [--json PATH]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/qdq_int.h"
#include "kernels/cuda/sign_step.h"

using namespace ar;

namespace {

struct Args {
  int64_t rows = 16384, seq = 2048, hidden = 4096, inter = 14336, heads = 32, kv = 8, head_dim = 128;
  int reps = 5;
  std::string json;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--rows") a.rows = std::atoll(v);
    else if (k == "--seq") a.seq = std::atoll(v);
    else if (k == "--hidden") a.hidden = std::atoll(v);
    else if (k == "--inter") a.inter = std::atoll(v);
    else if (k == "--heads") a.heads = std::atoll(v);
    else if (k == "--kv") a.kv = std::atoll(v);
    else if (k == "--head_dim") a.head_dim = std::atoll(v);
    else if (k == "--reps") a.reps = std::atoi(v);
    else if (k == "--json") a.json = v;
    else fail(ErrorKind::InvalidInput, "unknown option " + k);
  }
  return a;
}

// Milliseconds per call of f on ctx's stream (CUDA events), the best of `reps` after one warm-up.
double time_ms(cuda::DeviceContext& ctx, int reps, const std::function<void()>& f) {
  cudaEvent_t a, b;
  cuda::check(cudaEventCreate(&a), ctx.index(), "event");
  cuda::check(cudaEventCreate(&b), ctx.index(), "event");
  f();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, ctx.stream());
    f();
    cudaEventRecord(b, ctx.stream());
    ctx.synchronize();
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, double(ms));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

struct Linear {
  const char* name;
  int64_t in, out;
};

using Put = std::function<void(const std::string&, double)>;

// Causal GQA attention over rows / seq sequences: the tiled forward and backward against the same-run fp32
// GEMM rate (they run on the fp32 cores), and the unit kernels' forward once, for the ratio.
void bench_attention(cuda::DeviceContext& ctx, const Args& a, double fp32_tflops, const Put& put) {
  const ref::AttnShape s{a.rows / a.seq, a.seq, a.seq, a.heads, a.kv, a.head_dim};
  const int64_t nq = a.rows * a.heads * a.head_dim, nk = a.rows * a.kv * a.head_dim, nl = a.rows * a.heads;
  auto q = ctx.alloc<float>(nq), k = ctx.alloc<float>(nk), v = ctx.alloc<float>(nk), o = ctx.alloc<float>(nq),
       dout = ctx.alloc<float>(nq), dq = ctx.alloc<float>(nq), dk = ctx.alloc<float>(nk), dv = ctx.alloc<float>(nk);
  auto lse = ctx.alloc<float>(nl), delta = ctx.alloc<float>(nl);
  for (auto* t : {&q, &k, &v, &dout}) cudaMemsetAsync(t->data(), 0x3c, t->bytes(), ctx.stream());
  const double pairs = double(s.B) * double(s.H) * double(s.Tq) * double(s.Tq + 1) / 2;
  const double fwd_flop = 4.0 * pairs * double(s.D), bwd_flop = 14.0 * pairs * double(s.D);
  const double fwd_ms = time_ms(ctx, a.reps, [&] {
    cuda::attention_fwd(ctx, s, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data());
  });
  const double bwd_ms = time_ms(ctx, a.reps, [&] {
    cuda::attention_bwd(ctx, s, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data(), dout.data(),
                        delta.data(), dq.data(), dk.data(), dv.data());
  });
  const double units_ms = time_ms(ctx, 1, [&] {
    cuda::attention_fwd(ctx, s, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data(),
                        cuda::AttnKernels::Units);
  });
  const double fwd_tf = fwd_flop / fwd_ms * 1e-9, bwd_tf = bwd_flop / bwd_ms * 1e-9;
  std::printf("%-34s %10.2f ms  %6.1f TFLOP/s  %5.1f%% of fp32\n", "attention fwd (tiled)", fwd_ms, fwd_tf,
              100 * fwd_tf / fp32_tflops);
  std::printf("%-34s %10.2f ms  %6.1f TFLOP/s  %5.1f%% of fp32\n", "attention bwd (tiled)", bwd_ms, bwd_tf,
              100 * bwd_tf / fp32_tflops);
  std::printf("%-34s %10.2f ms  (%.1fx the tiled)\n", "attention fwd (unit kernels)", units_ms, units_ms / fwd_ms);
  put("attention_fwd_ms", fwd_ms);
  put("attention_bwd_ms", bwd_ms);
  put("attention_fwd_units_ms", units_ms);
}

// RMSNorm over the block's rows at the hidden width: forward, and backward with the weight gradient.
void bench_rmsnorm(cuda::DeviceContext& ctx, const Args& a, double copy_gbs, const Put& put) {
  const int64_t n = a.rows * a.hidden;
  auto x = ctx.alloc<float>(n), y = ctx.alloc<float>(n), dx = ctx.alloc<float>(n), w = ctx.alloc<float>(a.hidden),
       dw = ctx.alloc<float>(a.hidden), rstd = ctx.alloc<float>(a.rows);
  for (auto* t : {&x, &y, &w}) cudaMemsetAsync(t->data(), 0x3c, t->bytes(), ctx.stream());
  const double fwd_ms = time_ms(ctx, a.reps, [&] {
    cuda::rmsnorm_fwd(ctx, x.data(), w.data(), y.data(), rstd.data(), a.rows, a.hidden, 1e-5);
  });
  const double bwd_ms = time_ms(ctx, a.reps, [&] {
    cuda::rmsnorm_bwd(ctx, y.data(), x.data(), w.data(), rstd.data(), dx.data(), false, dw.data(), a.rows, a.hidden);
  });
  const double fwd_gbs = 8.0 * double(n) / fwd_ms * 1e-6, bwd_gbs = 12.0 * double(n) / bwd_ms * 1e-6;
  std::printf("%-34s %10.2f ms  %6.0f GB/s  %5.1f%% of copy\n", "rmsnorm fwd", fwd_ms, fwd_gbs, 100 * fwd_gbs / copy_gbs);
  std::printf("%-34s %10.2f ms  %6.0f GB/s  %5.1f%% of copy\n", "rmsnorm bwd (with dw)", bwd_ms, bwd_gbs,
              100 * bwd_gbs / copy_gbs);
  put("rmsnorm_fwd_ms", fwd_ms);
  put("rmsnorm_bwd_ms", bwd_ms);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::fprintf(stderr, "cuda_bench: no CUDA device (%s)\n", why.c_str());
    return 2;
  }
  cuda::DeviceContext ctx(0);
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), 0, "device properties");
  std::string json = "{\"device\": \"" + std::string(prop.name) + "\"";
  auto put = [&](const std::string& k, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    json += ", \"" + k + "\": " + buf;
  };

  // The limits: cuBLASLt on an 8192^3 product, and a device-to-device copy.
  const int64_t S = 8192;
  auto A16 = ctx.alloc<uint16_t>(S * S), B16 = ctx.alloc<uint16_t>(S * S);
  auto A32 = ctx.alloc<float>(S * S), B32 = ctx.alloc<float>(S * S), C = ctx.alloc<float>(S * S);
  cudaMemsetAsync(A16.data(), 0x3c, A16.bytes(), ctx.stream());  // small normal bf16 values
  cudaMemsetAsync(B16.data(), 0x3c, B16.bytes(), ctx.stream());
  cudaMemsetAsync(A32.data(), 0x3c, A32.bytes(), ctx.stream());
  cudaMemsetAsync(B32.data(), 0x3c, B32.bytes(), ctx.stream());
  const double sq_flop = 2.0 * double(S) * double(S) * double(S);
  const double bf16_peak = sq_flop / time_ms(ctx, a.reps, [&] {
    cuda::linear_fwd(ctx, cuda::GemmType::BF16, A16.data(), B16.data(), C.data(), S, S, S);
  }) * 1e-9;
  const double fp32_peak = sq_flop / time_ms(ctx, 2, [&] {
    cuda::linear_fwd(ctx, cuda::GemmType::F32, A32.data(), B32.data(), C.data(), S, S, S);
  }) * 1e-9;
  const double copy_gbs = 2.0 * double(A32.bytes()) / time_ms(ctx, a.reps, [&] {
    cudaMemcpyAsync(C.data(), A32.data(), A32.bytes(), cudaMemcpyDeviceToDevice, ctx.stream());
  }) * 1e-6;
  // (flop / ms * 1e-9 is TFLOP/s)
  std::printf("%-34s %10.1f TFLOP/s\n%-34s %10.1f TFLOP/s\n%-34s %10.0f GB/s\n", "cuBLASLt bf16 8192^3 (peak)",
              bf16_peak, "cuBLASLt fp32 8192^3", fp32_peak, "device copy (read + write)", copy_gbs);
  put("bf16_peak_tflops", bf16_peak);
  put("fp32_peak_tflops", fp32_peak);
  put("copy_gbs", copy_gbs);

  // The block's Linear products at `rows` rows (bf16 operands, fp32 outputs), fwd + dx + dW.
  const int64_t H = a.hidden, kvd = a.kv * a.head_dim, qd = a.heads * a.head_dim;
  const std::vector<Linear> lin = {{"q", H, qd},  {"k", H, kvd},         {"v", H, kvd},      {"o", qd, H},
                                   {"gate", H, a.inter}, {"up", H, a.inter}, {"down", a.inter, H}};
  int64_t max_in = 0, max_out = 0, max_w = 0, params = 0;
  for (const auto& l : lin) {
    max_in = std::max(max_in, l.in);
    max_out = std::max(max_out, l.out);
    max_w = std::max(max_w, l.in * l.out);
    params += l.in * l.out;
  }
  auto X = ctx.alloc<uint16_t>(a.rows * max_in), DY = ctx.alloc<uint16_t>(a.rows * max_out);
  auto W16 = ctx.alloc<uint16_t>(max_w);
  auto Y = ctx.alloc<float>(a.rows * std::max(max_in, max_out));
  auto DW = ctx.alloc<float>(max_w);
  cudaMemsetAsync(X.data(), 0x3c, X.bytes(), ctx.stream());
  cudaMemsetAsync(DY.data(), 0x3c, DY.bytes(), ctx.stream());
  cudaMemsetAsync(W16.data(), 0x3c, W16.bytes(), ctx.stream());
  double gemm_ms = 0;
  for (const auto& l : lin)
    gemm_ms += time_ms(ctx, a.reps, [&] {
      cuda::linear_fwd(ctx, cuda::GemmType::BF16, X.data(), W16.data(), Y.data(), a.rows, l.in, l.out);
      cuda::linear_dx(ctx, cuda::GemmType::BF16, DY.data(), W16.data(), Y.data(), a.rows, l.in, l.out);
      cuda::linear_dw(ctx, cuda::GemmType::BF16, DY.data(), X.data(), DW.data(), a.rows, l.in, l.out);
    });
  const double gemm_flop = 6.0 * double(a.rows) * double(params);
  const double gemm_rate = gemm_flop / gemm_ms * 1e-9;
  std::printf("%-34s %10.2f ms  %6.1f TFLOP/s  %5.1f%% of peak\n", "block Linears fwd+dx+dW (bf16)", gemm_ms,
              gemm_rate, 100 * gemm_rate / bf16_peak);
  put("block_linear_ms", gemm_ms);
  put("block_linear_pct_of_peak", 100 * gemm_rate / bf16_peak);

  // QDQ forward (bf16 What) + backward, and the step of V, over the block's weights at W4G128.
  double qdq_ms = 0, step_ms = 0, qdq_bytes = 0;
  auto Wf = ctx.alloc<float>(max_w), V = ctx.alloc<float>(max_w);
  auto dV = ctx.alloc<float>(max_w), best = ctx.alloc<float>(max_w);
  auto ab = ctx.alloc<float>((max_w / 128 + max_out) * 6);
  cudaMemsetAsync(Wf.data(), 0x3c, Wf.bytes(), ctx.stream());
  cudaMemsetAsync(V.data(), 0, V.bytes(), ctx.stream());
  cudaMemsetAsync(DW.data(), 0x3c, DW.bytes(), ctx.stream());
  cudaMemsetAsync(ab.data(), 0x3c, ab.bytes(), ctx.stream());
  for (const auto& l : lin) {
    quant::QdqShape sh;
    sh.out = l.out;
    sh.in = l.in;
    sh.group = 128;
    sh.bits = 4;
    sh.sym = true;
    const int64_t ng = l.out * sh.groups();
    float *alpha = ab.data(), *beta = alpha + ng, *lo = beta + ng, *hi = lo + ng, *da = hi + ng, *db = da + ng;
    qdq_ms += time_ms(ctx, a.reps, [&] {
      cuda::qdq_fwd(ctx, sh, Wf.data(), V.data(), alpha, beta, lo, hi, nullptr, W16.data(), nullptr, nullptr);
      cuda::qdq_bwd(ctx, sh, Wf.data(), V.data(), alpha, beta, lo, hi, DW.data(), dV.data(), da, db);
    });
    step_ms += time_ms(ctx, a.reps, [&] {
      cuda::sign_step(ctx, V.data(), dV.data(), l.in * l.out, 1e-3f, false, best.data(), nullptr);
    });
    qdq_bytes += double(l.in * l.out) * (4 + 4 + 2 + 4 + 4 + 4 + 4);  // W V -> What16; W V dW^ -> dV
  }
  const double qdq_gbs = qdq_bytes / qdq_ms * 1e-6;
  std::printf("%-34s %10.2f ms  %6.0f GB/s  %5.1f%% of copy\n", "block QDQ fwd+bwd (W4G128)", qdq_ms, qdq_gbs,
              100 * qdq_gbs / copy_gbs);
  std::printf("%-34s %10.2f ms\n", "block sign step of V (with save)", step_ms);
  put("block_qdq_ms", qdq_ms);
  put("block_qdq_pct_of_copy", 100 * qdq_gbs / copy_gbs);
  put("block_step_ms", step_ms);
  bench_attention(ctx, a, fp32_peak, put);
  bench_rmsnorm(ctx, a, copy_gbs, put);
  put("peak_device_mib", double(ctx.allocator().peak()) / (1 << 20));
  json += "}\n";
  if (!a.json.empty()) {
    FILE* f = std::fopen(a.json.c_str(), "w");
    if (!f) fail(ErrorKind::Io, "cannot write " + a.json);
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cuda_bench: %s\n", e.what());
  return 1;
}
