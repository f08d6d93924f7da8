// eval: perplexity and the KL comparison against a reference, on synthetic models. KL of a model
// against itself is exactly 0; against a perturbed copy it equals a direct double-precision
// computation from the logits; a reference with another vocabulary is refused.
#include <filesystem>

#include "core/error.h"
#include "eval/perplexity.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
std::string tmpdir(const std::string& n) {
  std::string d = ar::test::temp_path("eval_" + n);
  return d;
}
std::vector<int32_t> tokens(size_t n, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 7919 + i / 3) % size_t(vocab));
  return t;
}
}  // namespace

TEST(Eval, KlAgainstItselfIsExactlyZero) {
  std::string d = tmpdir("self");
  write_synthetic_model(d, tiny_llama_config(2), 1);
  auto m = HfModel::open(d);
  Context ctx(Device{}, 2);
  Transformer a(*m, ctx, false), b(*m, ctx, true);
  CompareResult c = compare_models(a, b, tokens(1000, 300), 64, 1, 3);
  EXPECT_EQ(c.kl_mean, 0.0);
  EXPECT_EQ(c.kl_max, 0.0);
  EXPECT_EQ(c.top1_agreement, 1.0);
  EXPECT_EQ(c.delta_ppl, 0.0);
  EXPECT_EQ(c.model.tokens_scored, 15 * 31);  // 15 windows of 64, positions 32..62 scored
  fs::remove_all(d);
}

TEST(Eval, KlMatchesDirectComputation) {
  std::string a = tmpdir("a"), b = tmpdir("b");
  write_synthetic_model(a, tiny_llama_config(1), 1);
  write_synthetic_model(b, tiny_llama_config(1), 1, DType::BF16);  // same weights rounded to bf16
  auto ma = HfModel::open(a), mb = HfModel::open(b);
  Context ctx(Device{}, 1);
  Transformer ref(*ma, ctx, false), q(*mb, ctx, false);
  auto t = tokens(128, 300);
  CompareResult c = compare_models(q, ref, t, 64, 1, 1);
  // Direct: per scored position, KL(p_ref || p_q) from double softmaxes of the two logit rows.
  std::vector<double> kls;
  for (int w = 0; w < 2; ++w) {
    std::vector<int32_t> ids(t.begin() + w * 64, t.begin() + (w + 1) * 64);
    ids[0] = 1;
    Tensor zp = ref.forward_logits(ids.data(), nullptr, 1, 64), zq = q.forward_logits(ids.data(), nullptr, 1, 64);
    for (int i = 32; i < 63; ++i) {
      auto lsm = [&](const float* z) {
        double mx = z[0], s = 0;
        for (int v = 1; v < 300; ++v) mx = std::max(mx, double(z[v]));
        for (int v = 0; v < 300; ++v) s += std::exp(double(z[v]) - mx);
        std::vector<double> r(300);
        for (int v = 0; v < 300; ++v) r[size_t(v)] = double(z[v]) - mx - std::log(s);
        return r;
      };
      auto lp = lsm(zp.f32() + i * 300), lq = lsm(zq.f32() + i * 300);
      double kl = 0;
      for (int v = 0; v < 300; ++v) kl += std::exp(lp[size_t(v)]) * (lp[size_t(v)] - lq[size_t(v)]);
      kls.push_back(kl);
    }
  }
  double mean = 0;
  for (double k : kls) mean += k;
  mean /= double(kls.size());
  EXPECT_GT(c.kl_mean, 0.0);
  EXPECT_NEAR(c.kl_mean, mean, 1e-6 + 1e-3 * mean);
  EXPECT_NEAR(c.kl_max, *std::max_element(kls.begin(), kls.end()), 1e-6 + 1e-3 * c.kl_max);
  EXPECT_GE(c.kl_p99, c.kl_median);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Eval, RefusesDifferentVocabularyAndShortText) {
  std::string a = tmpdir("va"), b = tmpdir("vb");
  write_synthetic_model(a, tiny_llama_config(1), 1);
  auto cfg = tiny_llama_config(1);
  cfg["vocab_size"] = 320;
  write_synthetic_model(b, cfg, 1);
  auto ma = HfModel::open(a), mb = HfModel::open(b);
  Context ctx(Device{}, 1);
  Transformer ta(*ma, ctx, false), tb(*mb, ctx, false);
  try {
    compare_models(ta, tb, tokens(200, 300), 64, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare_models(ta, ta, tokens(50, 300), 64, 1), Error);
  EXPECT_THROW(perplexity(ta, tokens(50, 300), 64, 1), Error);
  fs::remove_all(a);
  fs::remove_all(b);
}
