// GEMM throughput against the machine's limits measured in the same run (issue 10 groundwork).
//  - fp32 FMA peak: a tight loop of independent AVX-512 FMAs (16 accumulators) on 1 and on T threads;
//    the bf16 limit is twice that (VDPBF16PS does two multiply-adds per fp32 lane); the loop of
//    VDPBF16PS is measured too where the CPU has it.
//  - GEMMs of a Llama-3.2-1B-like block (hidden 2048, intermediate 8192, --tokens 4096): per Linear
//    (2048->2048, 2048->8192, 8192->2048) forward x W^T, backward dY W and dY^T X; and 2048^3.
//  - paths: OpenBLAS fp32 (cpu::gemm, the project's fp32 path), oneDNN fp32 (cpu::gemm_f32_dnnl),
//    oneDNN bf16 (cpu::gemm_bf16) without and with the fp32->bf16 conversion of both operands, and
//    for comparison one oneDNN bf16 matmul call with oneDNN's own OpenMP threads ("bf16_dnnl_omp": what
//    PyTorch does; fastest splitting, but the bits may depend on the thread count), and one cblas_sgemm
//    call on OpenBLAS's own threads ("f32_openblas_call": the library's own best rate); and the
//    row-independent GEMMs the tuner stacks MoE leaves on ("f32_rows": cpu::gemm_rows, "bf16_rows":
//    cpu::gemm_rows_bf16, op(A) = A only).
//    OPENBLAS_CORETYPE=SkylakeX in the environment makes OpenBLAS use its AVX-512 kernels.
// Output: one JSON line per (shape, path, threads), the peaks measured again after the GEMMs (a shared
// machine's load shows as a difference), then one summary line per path and thread count over the
// block's nine GEMMs. Ratios are against the peaks measured before the GEMMs. Times are the best of --reps calls after one warm-up call.
#include <cblas.h>
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
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
#include "kernels/cpu/isa.h"
#include "bench_args.h"
#include "peaks.h"
#include "kernels/cpu/ops.h"

extern "C" {  // libgomp, oneDNN's threading runtime (for the bf16_dnnl_omp comparison path)
int omp_get_max_threads(void);
void omp_set_num_threads(int n);
}

using namespace ar;
using bench::dpbf16_loop;
using bench::kAcc;
using bench::loop_peak;

namespace {
using bench::arg;
using bench::best_time;  // the first run warms up (page faults, oneDNN primitive creation)

struct GemmShape {
  std::string op;  // fwd (x W^T), bwd_dx (dY W), bwd_dw (dY^T X), square
  int64_t in, out;
  bool ta, tb;
  int64_t M, N, K;
};

// One GEMM shape: operands allocated once, every path timed.
struct Bufs {
  std::vector<float> A, B, C;
  std::vector<uint16_t> Ah, Bh;
};

// One oneDNN matmul over the whole shape with `threads` OpenMP threads (PyTorch's way).
void dnnl_omp_bf16(const GemmShape& s, const uint16_t* A, const uint16_t* B, float* C, int threads) {
  using dnnl::memory;
  using dt = memory::data_type;
  const int prev = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::dnnl_isa_cap();
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const memory::desc a({s.M, s.K}, dt::bf16, s.ta ? memory::dims{1, s.M} : memory::dims{s.K, 1});
  const memory::desc b({s.K, s.N}, dt::bf16, s.tb ? memory::dims{1, s.K} : memory::dims{s.N, 1});
  const memory::desc c({s.M, s.N}, dt::f32, memory::dims{s.N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
  dnnl::stream st(eng);
  dnnl::matmul(pd).execute(st, {{DNNL_ARG_SRC, memory(a, eng, const_cast<uint16_t*>(A))},
                                {DNNL_ARG_WEIGHTS, memory(b, eng, const_cast<uint16_t*>(B))},
                                {DNNL_ARG_DST, memory(c, eng, C)}});
  st.wait();
  omp_set_num_threads(prev);
}

std::string dnnl_omp_impl(const GemmShape& s, int threads) {
  using dnnl::memory;
  using dt = memory::data_type;
  const int prev = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::dnnl_isa_cap();
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const memory::desc a({s.M, s.K}, dt::bf16, s.ta ? memory::dims{1, s.M} : memory::dims{s.K, 1});
  const memory::desc b({s.K, s.N}, dt::bf16, s.tb ? memory::dims{1, s.K} : memory::dims{s.N, 1});
  const memory::desc c({s.M, s.N}, dt::f32, memory::dims{s.N, 1});
  std::string impl = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng).impl_info_str();
  omp_set_num_threads(prev);
  return impl;
}

struct Total {
  double flop = 0, time = 0;
};
}  // namespace

int main(int argc, char** argv) {
  ar::set_process_malloc_policy();  // as the CLI runs
  ar::flush_denormals();            // core/float_mode.h: on this thread and every later one
  try {
    ar::cpu::restart_for_openblas_core(argv);  // OpenBLAS's core as the CLI picks it
  } catch (const std::exception& e) {          // an unknown AR_CPU_ISA
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 2;
  }
  if (argc > 1 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::printf("gemm_bench [--tokens 4096] [--hidden 2048] [--inter 8192] [--square 2048] [--reps 2]\n"
                "           [--threads T (default: 1 and all)] [--peak_iters 100000000]\n"
                "           [--paths f32_openblas,f32_dnnl,bf16_dnnl,bf16_dnnl_incl_conv,bf16_dnnl_omp,\n"
                "                    f32_openblas_call,f32_rows,bf16_rows]\n");
    return 0;
  }
  const int64_t T = arg(argc, argv, "--tokens", 4096), H = arg(argc, argv, "--hidden", 2048),
                I = arg(argc, argv, "--inter", 8192), S = arg(argc, argv, "--square", 2048);
  const int reps = int(arg(argc, argv, "--reps", 2));
  const int64_t peak_iters = arg(argc, argv, "--peak_iters", 100000000);
  const int only = int(arg(argc, argv, "--threads", 0));
  const bool layouts = arg(argc, argv, "--layouts", 0) != 0;
  std::string path_filter;  // --paths a,b: only these paths
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--paths") == 0) path_filter = std::string(",") + argv[i + 1] + ",";
  cpu::dnnl_isa_cap();  // before anything asks oneDNN for its ISA
  const cpu::CpuIsa isa = cpu::cpu_isa();
  const bool bf16 = cpu::bf16_gemm_supported();
  const dnnl_version_t* v = dnnl_version();
  std::printf("gemm_bench: tokens %lld, hidden %lld, intermediate %lld, square %lld, best of %d\n", (long long)T,
              (long long)H, (long long)I, (long long)S, reps);
  std::printf("OpenBLAS kernel: %s | %s\n", openblas_get_corename(), openblas_get_config());
  std::printf("oneDNN %d.%d.%d, effective ISA %d; bf16: %s\n", v->major, v->minor, v->patch,
              int(dnnl::get_effective_cpu_isa()), cpu::bf16_support_summary().c_str());
  if (!isa.avx2) {
    std::printf("gemm_bench: the peak loops need AVX2 or AVX-512 (AR_CPU_ISA=%s)\n", cpu::isa_name(cpu::kernel_isa()));
    return 1;
  }
  std::printf("%s; FMA peak loop: %s\n", cpu::isa_summary().c_str(), bench::fp32_peak_isa());

  std::vector<GemmShape> shapes;
  for (auto [in, out] : {std::pair{H, H}, std::pair{H, I}, std::pair{I, H}}) {
    shapes.push_back({"fwd", in, out, false, true, T, out, in});
    shapes.push_back({"bwd_dx", in, out, false, false, T, in, out});
    shapes.push_back({"bwd_dw", in, out, true, false, out, in, T});
    if (layouts) {  // the backward products with other operand layouts (a transposed copy made first)
      shapes.push_back({"bwd_dx_wt", in, out, false, true, T, in, out});  // B = W^T stored [in, out]
      shapes.push_back({"bwd_dw_dyt", in, out, false, false, out, in, T});  // A = dY^T stored [out, T]
      shapes.push_back({"bwd_dw_dyt_xt", in, out, false, true, out, in, T});  // and B = X^T stored [in, T]
    }
  }
  shapes.push_back({"square", S, S, false, false, S, S, S});

  std::vector<int> thread_counts;
  if (only > 0) thread_counts = {only};
  else thread_counts = {1, Context().threads()};
  if (thread_counts.size() == 2 && thread_counts[1] == 1) thread_counts.pop_back();

  for (int t : thread_counts) {
    Context ctx(Device{}, t);
    const double fp32_peak = bench::fp32_peak_gflops(ctx, peak_iters);
    const double dp_peak = isa.avx512_bf16 ? loop_peak(ctx, dpbf16_loop, kAcc * 16 * 4, peak_iters) : 0.0;
    const double bf16_limit = 2 * fp32_peak;
    std::printf("{\"bench\":\"gemm_peak\",\"threads\":%d,\"fp32_fma_peak_gflops\":%.1f,\"bf16_limit_gflops\":%.1f,"
                "\"dpbf16_loop_gflops\":%.1f}\n",
                t, fp32_peak, bf16_limit, dp_peak);
    std::fflush(stdout);
    const char* paths[] = {"f32_openblas",        "f32_dnnl",      "bf16_dnnl", "bf16_dnnl_incl_conv",
                           "bf16_dnnl_omp", "f32_openblas_call", "f32_rows", "bf16_rows"};
    constexpr int kPaths = 8;
    Total totals[kPaths];
    for (const GemmShape& s : shapes) {
      const size_t na = size_t(s.M * s.K), nb = size_t(s.K * s.N);
      Bufs b;
      b.A.assign(na, 0.f);
      b.B.assign(nb, 0.f);
      for (size_t i = 0; i < na; ++i) b.A[i] = float(int(i * 7919 % 1999) - 999) * 1e-3f;
      for (size_t i = 0; i < nb; ++i) b.B[i] = float(int(i * 104729 % 2003) - 1001) * 1e-3f;
      b.C.assign(size_t(s.M * s.N), 0.f);
      b.Ah.resize(na);
      b.Bh.resize(nb);
      cpu::fp32_to_bf16(ctx, b.A.data(), b.Ah.data(), int64_t(na));
      cpu::fp32_to_bf16(ctx, b.B.data(), b.Bh.data(), int64_t(nb));
      const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
      const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
      for (int p = 0; p < kPaths; ++p) {
        if (p >= 2 && p <= 4 && !bf16) continue;
        if (p == 7 && (s.ta || !cpu::gemm_rows_bf16_supported())) continue;  // op(A) = A only
        if (!path_filter.empty() && path_filter.find(std::string(",") + paths[p] + ",") == std::string::npos) continue;
        std::function<void()> f;
        std::string kernel;
        switch (p) {
          case 0:
            f = [&] {
              cpu::gemm(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, b.A.data(), lda, b.B.data(), ldb, 0.f, b.C.data(), s.N);
            };
            kernel = std::string("openblas:") + openblas_get_corename();
            break;
          case 1:
            f = [&] {
              cpu::gemm_f32_dnnl(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, b.A.data(), lda, b.B.data(), ldb, 0.f, b.C.data(),
                                 s.N);
            };
            kernel = cpu::dnnl_matmul_impl(false, s.ta, s.tb, s.M, s.N, s.K);
            break;
          case 2:
            f = [&] {
              cpu::gemm_bf16(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, b.Ah.data(), lda, b.Bh.data(), ldb, 0.f, b.C.data(),
                             s.N);
            };
            kernel = cpu::dnnl_matmul_impl(true, s.ta, s.tb, s.M, s.N, s.K);
            break;
          case 3:
            f = [&] {
              cpu::fp32_to_bf16(ctx, b.A.data(), b.Ah.data(), int64_t(na));
              cpu::fp32_to_bf16(ctx, b.B.data(), b.Bh.data(), int64_t(nb));
              cpu::gemm_bf16(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, b.Ah.data(), lda, b.Bh.data(), ldb, 0.f, b.C.data(),
                             s.N);
            };
            kernel = cpu::dnnl_matmul_impl(true, s.ta, s.tb, s.M, s.N, s.K) + "+convert";
            break;
          case 4:
            f = [&] { dnnl_omp_bf16(s, b.Ah.data(), b.Bh.data(), b.C.data(), t); };
            kernel = dnnl_omp_impl(s, t);
            break;
          case 6:  // the row-independent fp32 GEMM (the FMA-chain kernel on every level)
            f = [&] {
              cpu::gemm_rows(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.f, b.A.data(), lda, b.B.data(), ldb, 0.f, b.C.data(),
                             s.N);
            };
            kernel = "fma_chain";
            break;
          case 7:  // the row-independent bf16 GEMM (VDPBF16PS chains)
            f = [&] {
              cpu::gemm_rows_bf16(ctx, s.tb, s.M, s.N, s.K, 1.f, b.Ah.data(), lda, b.Bh.data(), ldb, 0.f, b.C.data(),
                                  s.N);
            };
            kernel = "dpbf16_chain";
            break;
          case 5:  // one SGEMM call on OpenBLAS's own threads: the library's best, bits depend on threads
            f = [&] {
              openblas_set_num_threads(t);
              cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, int(s.M),
                          int(s.N), int(s.K), 1.f, b.A.data(), int(lda), b.B.data(), int(ldb), 0.f, b.C.data(),
                          int(s.N));
              openblas_set_num_threads(1);
            };
            kernel = std::string("openblas:") + openblas_get_corename();
            break;
        }
        const double sec = best_time(reps, f), gf = flop / sec / 1e9;
        if (s.op != "square") {
          totals[p].flop += flop;
          totals[p].time += sec;
        }
        std::printf("{\"bench\":\"gemm\",\"op\":\"%s\",\"in\":%lld,\"out\":%lld,\"M\":%lld,\"N\":%lld,\"K\":%lld,"
                    "\"ta\":%d,\"tb\":%d,\"threads\":%d,\"path\":\"%s\",\"kernel\":\"%s\",\"ms\":%.2f,\"gflops\":%.1f,"
                    "\"of_fp32_peak\":%.3f,\"of_bf16_limit\":%.3f}\n",
                    s.op.c_str(), (long long)s.in, (long long)s.out, (long long)s.M, (long long)s.N, (long long)s.K,
                    int(s.ta), int(s.tb), t, paths[p], kernel.c_str(), sec * 1e3, gf, gf / fp32_peak, gf / bf16_limit);
        std::fflush(stdout);
      }
    }
    // The peaks again after the GEMMs: on a shared machine the larger reading is the machine's.
    const double fp32_after = bench::fp32_peak_gflops(ctx, peak_iters);
    const double dp_after = isa.avx512_bf16 ? loop_peak(ctx, dpbf16_loop, kAcc * 16 * 4, peak_iters) : 0.0;
    std::printf("{\"bench\":\"gemm_peak_after\",\"threads\":%d,\"fp32_fma_peak_gflops\":%.1f,"
                "\"dpbf16_loop_gflops\":%.1f}\n",
                t, fp32_after, dp_after);
    for (int p = 0; p < kPaths; ++p) {
      if (totals[p].time == 0) continue;
      const double gf = totals[p].flop / totals[p].time / 1e9;
      std::printf("{\"bench\":\"gemm_block\",\"threads\":%d,\"path\":\"%s\",\"gemms\":9,\"s\":%.3f,\"gflops\":%.1f,"
                  "\"of_fp32_peak\":%.3f,\"of_bf16_limit\":%.3f,\"fp32_fma_peak_gflops\":%.1f,"
                  "\"bf16_limit_gflops\":%.1f}\n",
                  t, paths[p], totals[p].time, gf, gf / fp32_peak, gf / bf16_limit, fp32_peak, bf16_limit);
    }
  }
  return 0;
}
