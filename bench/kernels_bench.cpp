// Per-kernel microbenchmarks (Google Benchmark) on Llama-3-8B-like shapes, 512 tokens.
// Counters: GFLOP/s for GEMM-based ops, GB/s for the bandwidth-bound elementwise ops.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/context.h"
#include "kernels/cpu/ops.h"
#include "quant/qdq.h"
#include "kernels/cpu/bf16_ops.h"

using namespace ar;

namespace {
Context& ctx() {
  static Context c;  // benchmark fixture: one context for the process
  return c;
}
std::vector<float> filled(size_t n, float v) { return std::vector<float>(n, v); }

void BM_Linear(benchmark::State& st) {
  const int64_t n = 512, in = st.range(0), out = st.range(1);
  auto x = filled(size_t(n * in), 0.5f), w = filled(size_t(out * in), 0.01f), y = filled(size_t(n * out), 0.f);
  for (auto _ : st) cpu::linear_fwd(ctx(), x.data(), w.data(), nullptr, y.data(), n, in, out);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Linear)->Args({4096, 4096})->Args({4096, 14336})->Args({14336, 4096})->Unit(benchmark::kMillisecond);

void BM_RmsNormFwdBwd(benchmark::State& st) {
  const int64_t rows = 512, dim = 4096;
  auto x = filled(size_t(rows * dim), 0.3f), w = filled(size_t(dim), 1.f), y = x, dx = x, dw = w;
  std::vector<float> rstd(static_cast<size_t>(rows));
  for (auto _ : st) {
    cpu::rmsnorm_fwd(ctx(), x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-5);
    cpu::rmsnorm_bwd(ctx(), y.data(), x.data(), w.data(), rstd.data(), dx.data(), false, dw.data(), rows, dim);
  }
  st.counters["GB/s"] = benchmark::Counter(4.0 * 6 * rows * dim, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RmsNormFwdBwd)->Unit(benchmark::kMillisecond);

void BM_SwiGluFwdBwd(benchmark::State& st) {
  const int64_t n = 512 * 14336;
  auto g = filled(size_t(n), 0.2f), u = g, a = g, dg = g, du = g;
  for (auto _ : st) {
    cpu::swiglu_fwd(ctx(), g.data(), u.data(), a.data(), n);
    cpu::swiglu_bwd(ctx(), a.data(), g.data(), u.data(), dg.data(), du.data(), n);
  }
  st.counters["GB/s"] = benchmark::Counter(4.0 * 8 * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SwiGluFwdBwd)->Unit(benchmark::kMillisecond);

void BM_AttentionFwdBwd(benchmark::State& st) {
  const int64_t T = st.range(1);
  ref::AttnShape s{1, T, T, st.range(2), st.range(3), st.range(0)};  // one sample of T tokens: head_dim, heads / KV heads
  const size_t qn = size_t(s.Tq * s.H * s.D), kn = size_t(s.Tk * s.Hkv * s.D);
  auto q = filled(qn, 0.01f), k = filled(kn, 0.02f), v = filled(kn, 0.3f), o = q, dq = q, dk = k, dv = v;
  std::vector<float> lse(size_t(s.H * s.Tq));
  for (auto _ : st) {
    cpu::attention_fwd(ctx(), s, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data());
    cpu::attention_bwd(ctx(), s, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data(), o.data(), dq.data(),
                       dk.data(), dv.data());
  }
  // Executed GEMM FLOPs: 2 forward + 5 backward T x T x D products per head (full T x T, no causal skip).
  st.counters["GFLOP/s"] = benchmark::Counter(7.0 * 2 * s.H * s.Tq * s.Tk * s.D,
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
// Args: head_dim, tokens, heads, KV heads (the last: a 135M Llama's 256-token tuning leaf)
BENCHMARK(BM_AttentionFwdBwd)
    ->Args({128, 512, 32, 8})
    ->Args({64, 512, 32, 8})
    ->Args({64, 2048, 32, 8})
    ->Args({64, 256, 9, 3})
    ->Unit(benchmark::kMillisecond);

// SignRound's QDQ forward and backward of one 8192 x 2048 weight (W4, group 128, asym, min-max tuned):
// the per-iteration work outside the GEMMs. Arg: 0 forward (fp32 out), 1 backward, 2 forward with a
// bf16 out (--amp). Counter: weight elements per second.
void BM_QdqFwdBwd(benchmark::State& st) {
  const int64_t out = 8192, in = 2048;
  const bool backward = st.range(0) == 1, bf16 = st.range(0) == 2;
  const quant::QdqShape sh = quant::make_qdq_shape(out, in, 4, 128, false);
  const int64_t ng = out * sh.groups(), n = out * in;
  const size_t un = static_cast<size_t>(n), ug = static_cast<size_t>(ng);
  std::vector<float> W(un), V(un), dW(un), What(un), dV(un);
  std::vector<uint16_t> What16(un);
  for (int64_t i = 0; i < n; ++i) {
    W[size_t(i)] = float(int(i * 7919 % 2001) - 1000) * 1e-4f;
    V[size_t(i)] = float(int(i * 104729 % 1001) - 500) * 1e-3f;
    dW[size_t(i)] = float(int(i * 15485863 % 2003) - 1001) * 1e-6f;
  }
  std::vector<float> a(ug, 0.9f), b(ug, 1.f), lo(ug), hi(ug), s(ug), z(ug), da(ug), db(ug);
  quant::qdq_minmax(ctx(), sh, W.data(), lo.data(), hi.data());
  for (auto _ : st) {
    if (backward)
      quant::qdq_bwd(ctx(), sh, W.data(), V.data(), a.data(), b.data(), lo.data(), hi.data(), dW.data(), dV.data(),
                     da.data(), db.data());
    else if (bf16)
      quant::qdq_fwd(ctx(), sh, W.data(), V.data(), a.data(), b.data(), lo.data(), hi.data(), What16.data(),
                     s.data(), z.data());
    else
      quant::qdq_fwd(ctx(), sh, W.data(), V.data(), a.data(), b.data(), lo.data(), hi.data(), What.data(), s.data(),
                     z.data());
  }
  st.counters["Gelem/s"] = benchmark::Counter(double(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_QdqFwdBwd)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// bf16 transpose of an 8192 x 2048 weight (the input-gradient GEMM operand under --amp). Counter: GB/s
// of bytes read plus written.
void BM_TransposeBf16(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1);
  std::vector<uint16_t> src(static_cast<size_t>(rows * cols), 0x3f80), dst(src.size());
  for (auto _ : st) cpu::transpose_bf16(ctx(), src.data(), dst.data(), rows, cols);
  st.counters["GB/s"] = benchmark::Counter(4.0 * double(rows * cols), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TransposeBf16)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
