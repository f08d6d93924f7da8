// What AutoRound 0.16.1 and transformers 5.24 write, read back (tests/data/autoround_golden, made by
// tools/make_autoround_goldens.py outside the test suite):
// - tokenizer.json with transformers 5's Metaspace pre-tokenizer, and its prepend/split variants: ids
//   and decodes equal transformers' / tokenizers' for 27 strings (specials, spaces, bytes, scripts);
// - AutoRound's outputs of a tiny transformers-5 Llama (rope_parameters theta 1e5): auto_round W4G32,
//   the model-free RTN route (down_proj packed with rows padded to whole groups) and auto_gptq. eval's
//   perplexity and its KL against the FP model equal the float64 PyTorch computation of the same
//   numbers (ppl and delta ppl within a relative 1e-4, KL within 1e-4 of its value + 1e-7; top-1
//   agreement within the positions whose top two log-probs are closer than 1e-4).
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/hash.h"
#include "eval/perplexity.h"
#include "io/json_file.h"
#include "io/mapped_file.h"
#include "model/loader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
const std::string kGolden = std::string(AR_SOURCE_DIR) + "/tests/data/autoround_golden";

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

void expect_encodings(const Tokenizer& tok, const json& cases, const std::string& what) {
  ASSERT_GT(cases.size(), 20u) << what;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    EXPECT_EQ(show(tok.encode(text, true)), show(c["ids_add_special"].get<std::vector<int32_t>>())) << what << ": '" << text << "'";
    EXPECT_EQ(show(tok.encode(text, false)), show(c["ids_no_special"].get<std::vector<int32_t>>())) << what << ": '" << text << "'";
    if (c.contains("decode_skip_special")) {
      EXPECT_EQ(tok.decode(c["ids_add_special"].get<std::vector<int32_t>>(), true), c["decode_skip_special"].get<std::string>())
          << what << ": '" << text << "'";
    }
  }
}
}  // namespace

TEST(AutoRoundGolden, MetaspaceTokenizerEncodesAsTransformers) {
  auto tok = load_tokenizer(kGolden + "/tokenizer");
  EXPECT_EQ(tok->bos(), 1);
  expect_encodings(*tok, read_json_file(kGolden + "/tokenizer/encodings.json")["cases"], "prepend first, no split");
}

TEST(AutoRoundGolden, MetaspaceVariantsEncodeAsTokenizers) {
  for (const char* v : {"metaspace_always_split_false", "metaspace_always_split_true", "metaspace_first_split_true"}) {
    const std::string d = ar::test::temp_path(std::string("golden_") + v);
    fs::create_directories(d);
    fs::copy_file(kGolden + "/tokenizer_variants/" + v + ".tokenizer.json", d + "/tokenizer.json");
    fs::copy_file(kGolden + "/tokenizer/tokenizer_config.json", d + "/tokenizer_config.json");
    auto tok = load_tokenizer(d);
    expect_encodings(*tok, read_json_file(kGolden + "/tokenizer_variants/" + v + ".encodings.json")["cases"], v);
    fs::remove_all(d);
  }
}

TEST(AutoRoundGolden, EvalEqualsTransformersFloat64OnAutoRoundOutputs) {
  AR_REQUIRE_FIXTURES(fx);
  const json exp = read_json_file(kGolden + "/expected.json");
  const json& et = exp["eval_text"];
  const std::string text = read_text_file(fx + "/" + et["fixture"].get<std::string>())
                               .substr(et["byte_range"][0].get<size_t>(), et["bytes"].get<size_t>());
  auto fp = HfModel::open(kGolden + "/model_fp");
  EXPECT_EQ(fp->config().rope_theta, 100000.0);  // only inside rope_parameters (transformers 5)
  auto tok = load_tokenizer(*fp);
  const std::vector<int32_t> ids = tok->encode(text, true);
  ASSERT_EQ(int64_t(ids.size()), exp["tokens"]["count"].get<int64_t>());
  EXPECT_EQ(show(std::vector<int32_t>(ids.begin(), ids.begin() + 16)), show(exp["tokens"]["first_16"].get<std::vector<int32_t>>()));
  const int64_t ctx_len = exp["ctx"];
  Context ctx(Device{}, 2);
  Transformer ref(*fp, ctx, true);
  auto near = [](double got, double want, double rel) { return std::abs(got - want) <= rel * std::abs(want); };
  const json& rfp = exp["results"]["model_fp"]["perplexity"];
  PplResult p = perplexity(ref, ids, ctx_len, tok->bos(), 4);
  EXPECT_EQ(p.tokens_scored, rfp["tokens_scored"].get<int64_t>());
  EXPECT_TRUE(near(p.ppl, rfp["ppl"], 1e-4)) << p.ppl << " vs " << rfp["ppl"];
  for (const char* name : {"w4g32_autoround", "rtn_modelfree", "w4g32_gptq"}) {
    auto qm = HfModel::open(kGolden + "/" + name);
    ASSERT_TRUE(qm->config().quant.present) << name;
    Transformer q(*qm, ctx, true);
    const json& r = exp["results"][name]["vs_model_fp"];
    CompareResult c = compare_models(q, ref, ids, ctx_len, tok->bos(), 4);
    EXPECT_TRUE(near(c.model.ppl, r["model"]["ppl"], 1e-4)) << name << ": ppl " << c.model.ppl << " vs " << r["model"]["ppl"];
    EXPECT_TRUE(near(c.delta_ppl, r["delta_ppl"], 1e-4 * r["model"]["ppl"].get<double>() / r["delta_ppl"].get<double>()))
        << name << ": delta ppl " << c.delta_ppl << " vs " << r["delta_ppl"];
    for (const char* k : {"kl_mean", "kl_median", "kl_p99", "kl_max"}) {
      const double got = k == std::string("kl_mean") ? c.kl_mean : k == std::string("kl_median") ? c.kl_median
                         : k == std::string("kl_p99") ? c.kl_p99 : c.kl_max;
      EXPECT_NEAR(got, r[k].get<double>(), 1e-4 * r[k].get<double>() + 1e-7) << name << ": " << k;
    }
    const double ties = r["top1_near_ties"]["positions_with_gap_below_1e-4"].get<double>() / double(c.model.tokens_scored);
    EXPECT_NEAR(c.top1_agreement, r["top1_agreement"].get<double>(), ties + 1e-12) << name;
    std::fprintf(stderr, "%s: ppl %.7f (float64 %.7f), KL mean %.7e (float64 %.7e)\n", name, c.model.ppl,
                 r["model"]["ppl"].get<double>(), c.kl_mean, r["kl_mean"].get<double>());
  }
}
