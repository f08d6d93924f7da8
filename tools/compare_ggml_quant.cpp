// Evidence tool, not part of the build or the tests: quantizes the same synthetic rows with our
// gguf_quantize_search / gguf_quantize_rtn and with llama.cpp's own ggml_quantize_chunk (with and
// without an imatrix), and prints each one's imatrix-weighted error sum_c imat[c] (w - w^)^2 and the
// plain squared error, for every type. Weights: Student-t (5 dof) rows with per-row scales; imatrix:
// log-normal with a few 50x outlier channels (as LLM activations have).
//
// For q4_1/q5_1 (AutoRound: min-max RTN, which gguf_quantize_search keeps) it also prints what the
// k-quant step wls_asym_search with the imatrix would give per 32-block (d, m written as fp16), the
// search llama.cpp runs there (make_qkx3_quants).
//
// Build (after building ar_quant in build-ggs and llama.cpp's ggml in /work/llamacpp/build), one line:
//   B=build-ggs; G=/work/llamacpp/build/bin; V=/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
//   c++ -O2 -std=c++20 -Isrc -I$V/include tools/compare_ggml_quant.cpp -o /tmp/compare_ggml_quant
//     $B/src/quant/libar_quant.a $B/src/model/libar_model.a $B/src/kernels/libar_kernels.a $B/src/io/libar_io.a
//     $B/src/parallel/libar_parallel.a $B/src/core/libar_core.a -ldnnl -lOpenCL -lgomp -lpcre2-8 -lutf8proc
//     -lopenblas -ldl -L$G -lggml-base -Wl,-rpath,$G
//   /tmp/compare_ggml_quant [rows=256] [cols=4096] [seed=1]
#include <ggml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/context.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_search.h"
#include "quant/gguf_search_steps.h"

namespace aq = ar::quant;

namespace {
struct Err {
  double weighted = 0, plain = 0;
};
Err errors(const std::vector<float>& W, const std::vector<float>& Wh, const std::vector<float>& imat, int64_t cols) {
  Err e;
  for (size_t i = 0; i < W.size(); ++i) {
    const double d = double(W[i]) - double(Wh[i]);
    e.weighted += double(imat[i % size_t(cols)]) * d * d;
    e.plain += d * d;
  }
  return e;
}

std::vector<float> ggml_roundtrip(ggml_type gt, const std::vector<float>& W, int64_t rows, int64_t cols,
                                  const float* imat) {
  std::vector<uint8_t> buf(size_t(rows) * ggml_row_size(gt, cols));
  ggml_quantize_chunk(gt, W.data(), buf.data(), 0, rows, cols, imat);
  std::vector<float> out(W.size());
  ggml_get_type_traits(gt)->to_float(buf.data(), out.data(), rows * cols);
  return out;
}

// q4_1 / q5_1 by the k-quant asym search per 32-block (not what gguf_quantize_search does).
std::vector<float> legacy_asym_wls(const std::vector<float>& W, int64_t cols, const std::vector<float>& imat,
                                   int qmax) {
  namespace st = aq::gguf_steps;
  std::vector<float> out(W.size());
  float wt[32];
  for (size_t b = 0; b < W.size() / 32; ++b) {
    const float* x = W.data() + b * 32;
    st::imatrix_fix_zeros(imat.data() + (b * 32) % size_t(cols), x, 32, qmax == 15 ? 4 : 5, wt);
    const st::AsymFit f = st::wls_asym_search(x, wt, 32, qmax, -0.9f, 0.05f, 36, false);
    const float d = ar::f16_to_f32(ar::f32_to_f16(f.scale)), m = ar::f16_to_f32(ar::f32_to_f16(-f.min));
    for (int i = 0; i < 32; ++i) {
      const float q = d > 0 ? std::fmin(float(qmax), std::fmax(0.0f, std::nearbyint((x[i] - m) / d))) : 0.0f;
      out[b * 32 + size_t(i)] = d * q + m;
    }
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 256, cols = argc > 2 ? std::atoll(argv[2]) : 4096;
  const unsigned seed = argc > 3 ? unsigned(std::atoi(argv[3])) : 1u;
  std::mt19937 rng(seed);
  std::student_t_distribution<float> td(5.0f);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> W(static_cast<size_t>(rows * cols)), imat(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float rs = 0.02f * std::exp(0.3f * nd(rng));
    for (int64_t c = 0; c < cols; ++c) W[size_t(r * cols + c)] = rs * td(rng);
  }
  for (auto& v : imat) v = std::exp(1.5f * nd(rng));
  for (int k = 0; k < 8; ++k) imat[size_t(rng() % uint32_t(cols))] *= 50.0f;

  ar::Context ctx(ar::Device{}, 0);
  struct T {
    aq::GgmlType ours;
    ggml_type theirs;
  };
  const T types[] = {{aq::GgmlType::Q2_K, GGML_TYPE_Q2_K}, {aq::GgmlType::Q3_K, GGML_TYPE_Q3_K},
                     {aq::GgmlType::Q4_K, GGML_TYPE_Q4_K}, {aq::GgmlType::Q5_K, GGML_TYPE_Q5_K},
                     {aq::GgmlType::Q6_K, GGML_TYPE_Q6_K}, {aq::GgmlType::Q4_0, GGML_TYPE_Q4_0},
                     {aq::GgmlType::Q5_0, GGML_TYPE_Q5_0}, {aq::GgmlType::Q8_0, GGML_TYPE_Q8_0},
                     {aq::GgmlType::Q4_1, GGML_TYPE_Q4_1}, {aq::GgmlType::Q5_1, GGML_TYPE_Q5_1}};
  std::printf("rows %lld cols %lld seed %u\n", (long long)rows, (long long)cols, seed);
  std::printf("imatrix-weighted error sum imat (w - w^)^2, and in [] relative to ggml with imatrix:\n");
  std::printf("%-5s %12s %12s %12s %12s | plain SSE, no imatrix: %10s %10s %10s\n", "type", "ours+imat",
              "ggml+imat", "ours RTN", "ggml noimat", "ours", "ggml", "ours RTN");
  for (const T& t : types) {
    std::vector<float> a(W.size()), r(W.size()), a0(W.size());
    aq::gguf_quantize_search(ctx, t.ours, W.data(), rows, cols, imat.data(), a.data());
    aq::gguf_quantize_search(ctx, t.ours, W.data(), rows, cols, nullptr, a0.data());
    aq::gguf_quantize_rtn(ctx, t.ours, W.data(), rows, cols, r.data());
    const std::vector<float> g = ggml_roundtrip(t.theirs, W, rows, cols, imat.data());
    const std::vector<float> g0 = ggml_roundtrip(t.theirs, W, rows, cols, nullptr);
    const Err ea = errors(W, a, imat, cols), eg = errors(W, g, imat, cols), er = errors(W, r, imat, cols),
              eg0 = errors(W, g0, imat, cols), ea0 = errors(W, a0, imat, cols);
    std::printf("%-5s %12.5g %12.5g %12.5g %12.5g | %10.5g %10.5g %10.5g   [ours+imat %.3f, rtn %.3f]\n",
                aq::ggml_type_name(t.ours), ea.weighted, eg.weighted, er.weighted, eg0.weighted, ea0.plain, eg0.plain,
                er.plain, ea.weighted / eg.weighted, er.weighted / eg.weighted);
    if (t.ours == aq::GgmlType::Q4_1 || t.ours == aq::GgmlType::Q5_1) {
      const Err ew = errors(W, legacy_asym_wls(W, cols, imat, t.ours == aq::GgmlType::Q4_1 ? 15 : 31), imat, cols);
      std::printf("      (%s by wls_asym_search + imatrix, not the default: %.5g, %.3f of ggml+imat)\n",
                  aq::ggml_type_name(t.ours), ew.weighted, ew.weighted / eg.weighted);
    }
  }
  return 0;
}
