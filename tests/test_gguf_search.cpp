// AutoRound's RTN search for ggml types (gguf_search): for every type the packed bytes decode exactly
// to the returned weight; with an imatrix the imatrix-weighted error is below round-to-nearest's
// (gguf_rtn) over the tensor (and in every block for the legacy types, whose search includes RTN's
// scale); without one the plain error is not above RTN's; degenerate rows and imatrices give finite,
// valid blocks; and each search step on a case small enough to check by hand.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/context.h"
#include "core/error.h"
#include "quant/ggml_kquants.h"
#include "quant/ggml_legacy.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_search.h"
#include "quant/gguf_search_steps.h"
#include "test_util.h"

using namespace ar;
using namespace ar::quant;
namespace st = ar::quant::gguf_steps;

namespace {

const GgmlType kAll[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                         GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q5_1};

bool searched(GgmlType t) { return t != GgmlType::Q4_1 && t != GgmlType::Q5_1; }

// Random weights (normal, std 0.05) with an outlier per row, and an imatrix spread over two decades.
struct Case {
  int64_t rows = 8, cols = 1024;
  std::vector<float> W, imat;
  explicit Case(uint32_t seed) {
    W = test::randn<float>(size_t(rows * cols), seed, 0.05);
    for (int64_t r = 0; r < rows; ++r) W[size_t(r * cols + (37 * r + 5) % cols)] = r % 2 ? 0.9f : -0.7f;
    std::mt19937 rng(seed + 1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    imat.resize(size_t(cols));
    for (auto& v : imat) v = std::exp(1.2f * nd(rng));
  }
};

// Sum of imat[c] (W - What)^2 over elements [e0, e1) of the flattened tensor (imat null: weight 1).
double werr(const std::vector<float>& W, const std::vector<float>& What, const float* imat, int64_t cols, int64_t e0,
            int64_t e1) {
  double e = 0;
  for (int64_t i = e0; i < e1; ++i) {
    const double d = double(W[size_t(i)]) - double(What[size_t(i)]);
    e += (imat ? double(imat[i % cols]) : 1.0) * d * d;
  }
  return e;
}

std::vector<float> quantize(Context& ctx, GgmlType t, const std::vector<float>& W, int64_t rows, int64_t cols,
                            const float* imat, std::vector<uint8_t>* bytes_out = nullptr) {
  std::vector<float> What(W.size()), dec(W.size());
  const std::vector<uint8_t> bytes = gguf_quantize_search(ctx, t, W.data(), rows, cols, imat, What.data());
  EXPECT_EQ(int64_t(bytes.size()), rows * ggml_row_bytes(t, cols));
  ggml_dequantize(t, bytes.data(), dec.data(), rows * cols);
  for (size_t i = 0; i < W.size(); ++i) {
    EXPECT_EQ(dec[i], What[i]) << ggml_type_name(t) << " element " << i;
    EXPECT_TRUE(std::isfinite(What[i])) << ggml_type_name(t) << " element " << i;
    if (dec[i] != What[i] || !std::isfinite(What[i])) break;
  }
  if (bytes_out) *bytes_out = bytes;
  return What;
}

}  // namespace

TEST(GgufSearch, ImatrixWeightedErrorBelowRtnForEveryType) {
  Context ctx(Device{}, 2);
  const Case c(11);
  for (GgmlType t : kAll) {
    const std::vector<float> What = quantize(ctx, t, c.W, c.rows, c.cols, c.imat.data());
    std::vector<float> Wrtn(c.W.size());
    gguf_quantize_rtn(ctx, t, c.W.data(), c.rows, c.cols, Wrtn.data());
    const int64_t be = ggml_block_elems(t), n = c.rows * c.cols;
    int64_t worse = 0;
    double worst = 0;
    for (int64_t b = 0; b < n / be; ++b) {
      const double es = werr(c.W, What, c.imat.data(), c.cols, b * be, (b + 1) * be);
      const double er = werr(c.W, Wrtn, c.imat.data(), c.cols, b * be, (b + 1) * be);
      if (es > er) ++worse, worst = std::max(worst, es / er);
    }
    const double es = werr(c.W, What, c.imat.data(), c.cols, 0, n), er = werr(c.W, Wrtn, c.imat.data(), c.cols, 0, n);
    std::printf("%s imatrix-weighted error: search %.6g rtn %.6g (%.1f%%), blocks worse %lld/%lld (worst x%.3f)\n",
                ggml_type_name(t), es, er, 100.0 * es / er, (long long)worse, (long long)(n / be), worst);
    if (!searched(t)) {
      EXPECT_EQ(es, er) << ggml_type_name(t) << " is min-max RTN in AutoRound";
      continue;
    }
    EXPECT_LT(es, er) << ggml_type_name(t);
    if (!ggml_is_kquant(t)) {
      EXPECT_EQ(worse, 0) << ggml_type_name(t) << ": RTN's scale is one of the candidates";
    }
  }
}

TEST(GgufSearch, DataFreeErrorNotAboveRtn) {
  Context ctx(Device{}, 2);
  const Case c(23);
  for (GgmlType t : kAll) {
    const std::vector<float> What = quantize(ctx, t, c.W, c.rows, c.cols, nullptr);
    std::vector<float> Wrtn(c.W.size());
    gguf_quantize_rtn(ctx, t, c.W.data(), c.rows, c.cols, Wrtn.data());
    const int64_t n = c.rows * c.cols;
    const double es = werr(c.W, What, nullptr, c.cols, 0, n), er = werr(c.W, Wrtn, nullptr, c.cols, 0, n);
    std::printf("%s data-free squared error: search %.6g rtn %.6g (%.1f%%)\n", ggml_type_name(t), es, er,
                100.0 * es / er);
    EXPECT_LE(es, er) << ggml_type_name(t);
    // An imatrix of zeros is no imatrix (AutoRound's data-free search).
    const std::vector<float> zeros(size_t(c.cols), 0.0f);
    EXPECT_EQ(quantize(ctx, t, c.W, c.rows, c.cols, zeros.data()), What) << ggml_type_name(t);
  }
}

TEST(GgufSearch, DegenerateRowsAndImatrixZerosGiveFiniteValidBlocks) {
  Context ctx(Device{}, 3);
  const int64_t rows = 5, cols = 512;
  std::vector<float> W = test::randn<float>(size_t(rows * cols), 5, 0.02);
  for (int64_t i = 0; i < cols; ++i) {
    W[size_t(0 * cols + i)] = 0.0f;     // all zero
    W[size_t(1 * cols + i)] = 0.25f;    // positive constant
    W[size_t(2 * cols + i)] = -0.125f;  // negative constant
  }
  // imatrix: one zero per 16 in the first half, then whole 32-column groups of zeros.
  std::vector<float> imat(size_t(cols), 1.0f);
  for (int64_t i = 0; i < cols; ++i) {
    imat[size_t(i)] = 0.5f + float(i % 7);
    if (i < cols / 2 && i % 16 == 3) imat[size_t(i)] = 0.0f;
    if (i >= cols / 2 && (i / 32) % 2 == 0) imat[size_t(i)] = 0.0f;
  }
  for (GgmlType t : kAll)
    for (const float* im : {static_cast<const float*>(imat.data()), static_cast<const float*>(nullptr)}) {
      const std::vector<float> What = quantize(ctx, t, W, rows, cols, im);
      for (int64_t i = 0; i < cols; ++i) {
        ASSERT_EQ(What[size_t(i)], 0.0f) << ggml_type_name(t) << " zero row, element " << i;
        ASSERT_NEAR(What[size_t(cols + i)], 0.25f, 0.25f * 2e-3f) << ggml_type_name(t) << " element " << i;
        ASSERT_NEAR(What[size_t(2 * cols + i)], -0.125f, 0.125f * 2e-3f) << ggml_type_name(t) << " element " << i;
      }
      // The random rows stay within the RTN error's ballpark even where the imatrix is zero.
      std::vector<float> Wrtn(W.size());
      gguf_quantize_rtn(ctx, t, W.data(), rows, cols, Wrtn.data());
      const double es = werr(W, What, nullptr, cols, 3 * cols, rows * cols);
      const double er = werr(W, Wrtn, nullptr, cols, 3 * cols, rows * cols);
      EXPECT_LT(es, 2.0 * er) << ggml_type_name(t) << (im ? " imatrix" : " no imatrix");
    }
}

TEST(GgufSearch, SameBytesOnAnyThreadCountAndInputChecks) {
  const Case c(31);
  Context one(Device{}, 1), three(Device{}, 3);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_0}) {
    const auto a = gguf_quantize_search(one, t, c.W.data(), c.rows, c.cols, c.imat.data());
    const auto b = gguf_quantize_search(three, t, c.W.data(), c.rows, c.cols, c.imat.data());
    EXPECT_EQ(a, b) << ggml_type_name(t);
  }
  std::vector<float> bad = c.imat;
  bad[7] = -1.0f;
  EXPECT_THROW(gguf_quantize_search(one, GgmlType::Q4_K, c.W.data(), c.rows, c.cols, bad.data()), Error);
  bad[7] = NAN;
  EXPECT_THROW(gguf_quantize_search(one, GgmlType::Q4_0, c.W.data(), c.rows, c.cols, bad.data()), Error);
  EXPECT_THROW(gguf_quantize_search(one, GgmlType::Q5_1, c.W.data(), c.rows, c.cols, bad.data()), Error);
  EXPECT_THROW(gguf_quantize_search(one, GgmlType::Q4_K, c.W.data(), 1, 100, nullptr), Error);
}

// ---- the steps, by hand ----

TEST(GgufSearchSteps, ImatrixZeroFixUp) {
  const float x[4] = {1.0f, -2.0f, 0.5f, 2.0f};
  float out[4];
  const float one_zero[4] = {1.0f, 0.0f, 3.0f, 2.0f};  // the zero takes the mean of the others, 6 / 3
  st::imatrix_fix_zeros(one_zero, x, 4, 4, out);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[0], 1.0f);
  const float all_zero[4] = {0, 0, 0, 0};  // falls back to |x| (<= 3 bits) or |x| + sqrt(sum x^2 / 32)
  st::imatrix_fix_zeros(all_zero, x, 4, 3, out);
  EXPECT_EQ(out[1], 2.0f);
  st::imatrix_fix_zeros(all_zero, x, 4, 4, out);
  EXPECT_FLOAT_EQ(out[1], 2.0f + std::sqrt(9.25f / 32.0f));
  float im32[32], x32[32], out32[32];
  for (int i = 0; i < 32; ++i) im32[i] = i < 17 ? 0.0f : 4.0f, x32[i] = -1.0f;
  st::imatrix_fix_zeros(im32, x32, 32, 5, out32);  // 17 zeros > 32/2: the data-free weights everywhere
  EXPECT_FLOAT_EQ(out32[20], 1.0f + std::sqrt(32.0f / 32.0f));
  im32[0] = 4.0f;  // 16 zeros: mean fill
  st::imatrix_fix_zeros(im32, x32, 32, 5, out32);
  EXPECT_EQ(out32[5], 4.0f);
}

TEST(GgufSearchSteps, WlsAsymSearchRefitsScaleAndMin) {
  // Min-max: scale 3.3 / 3 = 1.1, codes 0 1 2 3, error 0 + 0.01 + 0.04 + 0 = 0.05. The least-squares
  // line through (L, x) = (0,0) (1,1) (2,2) (3,3.3): slope 5.45 / 5 = 1.09, intercept 1.575 - 1.09 * 1.5
  // = -0.06; re-rounded codes stay 0 1 2 3, error 0.0036 + 0.0009 + 0.0144 + 0.0081 = 0.027: kept.
  const float x[4] = {0.0f, 1.0f, 2.0f, 3.3f}, w[4] = {1, 1, 1, 1};
  const st::AsymFit f = st::wls_asym_search(x, w, 4, 3, -1.0f, 0.1f, 20, false);
  EXPECT_NEAR(f.scale, 1.09f, 1e-5f);
  EXPECT_NEAR(f.min, 0.06f, 1e-5f);
  // Exact data: min-max is already perfect and nothing replaces it.
  const float y[4] = {-1.0f, 0.0f, 1.0f, 2.0f};
  const st::AsymFit g = st::wls_asym_search(y, w, 4, 3, -0.9f, 0.05f, 36, false);
  EXPECT_FLOAT_EQ(g.scale, 1.0f);
  EXPECT_FLOAT_EQ(g.min, 1.0f);
  // A positive fitted intercept is set to 0 (the min stored is >= 0): x = {2, 3, 4, 5} from rmin = 0
  // gives codes such as {1, 2, 2, 3}, whose line 1.5 L + 0.5 is refitted through 0: 31 / 18 L.
  const float z[4] = {2.0f, 3.0f, 4.0f, 5.0f};
  const st::AsymFit h = st::wls_asym_search(z, w, 4, 3, -0.9f, 0.05f, 36, false);
  EXPECT_EQ(h.min, 0.0f);
  EXPECT_GT(h.scale, 0.0f);
}

TEST(GgufSearchSteps, QpQuantsTriesScalesThenLeastSquares) {
  // v = {1, 1.6}, nmax 2: max / 2 = 0.8 gives codes {1, 2}, error 0.04; max / 1.9 = 0.842 gives the same
  // codes with error 0.032 (kept); the least-squares d for codes {1, 2} is (1 + 3.2) / 5 = 0.84.
  const float v[2] = {1.0f, 1.6f}, w[2] = {1.0f, 1.0f};
  int L[2];
  EXPECT_NEAR(st::qp_quants(v, w, 2, 2, L), 0.84f, 1e-6f);
  EXPECT_EQ(L[0], 1);
  EXPECT_EQ(L[1], 2);
  const float zeros[3] = {0, 0, 0}, w3[3] = {1, 1, 1};
  int L3[3];
  EXPECT_EQ(st::qp_quants(zeros, w3, 3, 63, L3), 0.0f);
  EXPECT_EQ(L3[0], 0);
}

TEST(GgufSearchSteps, QxQuantsAndQ3QuantsAreSignedLeastSquares) {
  // max = 4 -> iscale = -1, codes -4 -2 2 -1 fit exactly: scale = -25 / 25 = -1.
  const float x[4] = {4.0f, 2.0f, -2.0f, 1.0f}, w[4] = {1, 1, 1, 1};
  EXPECT_FLOAT_EQ(st::qx_quants(x, w, 4, 4), -1.0f);
  EXPECT_FLOAT_EQ(st::qx_quants(x, nullptr, 4, 4), -1.0f);
  EXPECT_FLOAT_EQ(st::q3_quants_rmse(x, 4, 4), -1.0f);
  // The weights pick what is fitted: {4, 1.5}, nmax 4 -> codes {-4, -2} (-1.5 rounds to -2); weights
  // {1, 0}: 4 * -4 / 16 = -1; weights {0, 1}: 1.5 * -2 / 4 = -0.75 (any candidate fits one value
  // exactly, so none is strictly better and the first stays).
  const float y[2] = {4.0f, 1.5f}, w10[2] = {1, 0}, w01[2] = {0, 1};
  EXPECT_FLOAT_EQ(st::qx_quants(y, w10, 2, 4), -1.0f);
  EXPECT_FLOAT_EQ(st::qx_quants(y, w01, 2, 4), -0.75f);
  const float zeros[3] = {0, 0, 0};
  EXPECT_EQ(st::qx_quants(zeros, nullptr, 3, 4), 0.0f);
  EXPECT_EQ(st::q3_quants_rmse(zeros, 3, 4), 0.0f);
}

TEST(GgufSearchSteps, IntSymSearchStartsFromRtnAndFollowsTheWeights) {
  float x[32] = {}, w[32];
  for (float& v : w) v = 1.0f;
  x[0] = -8.0f;  // gmax = -8: RTN's d = fp16(-8 / -8) = 1
  x[1] = 5.0f;   // exact at d = 1: no candidate is strictly better
  EXPECT_EQ(st::int_sym_search(x, nullptr, 32, -8, 7), 1.0f);
  x[1] = 4.4f;  // d = 1 costs 0.16 on x[1] ...
  x[2] = 3.0f;  // ... but with x[0] and x[2] weighted 100, the neighbours 8 / (8 -+ 0.06) cost > 0.3 on
  w[0] = w[2] = 100.0f;  // x[0], and 8 / 7 (x[0] -> -7) costs 100 * 0.43^2 on x[2]
  EXPECT_EQ(st::int_sym_search(x, w, 32, -8, 7), 1.0f);
  x[2] = 0.0f;
  w[0] = w[2] = 1.0f, w[1] = 100.0f;  // now x[1] leads: d = 8 / (8 - 0.06 * 12) = 1.0989 -> 4.3956 (and -7.69)
  const float d = st::int_sym_search(x, w, 32, -8, 7);
  EXPECT_NEAR(d, 8.0f / (8.0f - 0.06f * 12.0f), 1e-3f);
  double e = 0;
  for (int i = 0; i < 32; ++i) {
    const double q = std::clamp(std::nearbyint(x[i] / d), -8.0f, 7.0f), diff = d * q - x[i];
    e += w[i] * diff * diff;
  }
  EXPECT_LT(e, 0.1);
}
