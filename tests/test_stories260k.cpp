// Real-model validation on ../shared/fixtures/stories260K (skipped with a message when absent):
// convert -> greedy generation reproduces llama2.c's published outputs byte for byte; token ids
// match the derived fixture; converted-model logits equal a llama2.c-semantics reference forward
// (interleaved rotary, run on the raw checkpoint in double); the tokenizer's O(n log n) merge equals
// run.c's quadratic rescan.
#include <filesystem>

#include "core/error.h"
#include "eval/generate.h"
#include "eval/perplexity.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/llama2c.h"
#include "io/mapped_file.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/rmsnorm_ref.h"
#include "kernels/ref/swiglu_ref.h"
#include "model/convert_llama2c.h"
#include "model/loader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer_llama2c.h"
#include "model/transformer.h"
#include "test_util.h"
#include "stories260k_model.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
// Converted model directory shared by the tests of this file (converted once per process).
std::string converted(const std::string& fx) {
  struct Dir {  // removed when the process exits
    std::string path;
    ~Dir() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  };
  static Dir dir;
  if (!dir.path.empty()) return dir.path;
  dir.path = (fs::temp_directory_path() / ("ar_s260_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir.path);
  test::convert_stories260k(fx, dir.path);
  return dir.path;
}

std::string generate_text(const std::string& dir, const std::string& prompt, int64_t n) {
  auto m = HfModel::open(dir);
  auto tok = load_tokenizer(dir);
  Context ctx(Device{}, 2);
  Transformer t(*m, ctx, true);
  auto ids = generate_greedy(t, tok->encode(prompt), n);
  return tok->decode(ids);
}

// run.c's merge loop, verbatim in spirit: rescan all pairs, take the first best, repeat.
std::vector<int32_t> quadratic_merge(const std::vector<std::string>& pieces, const std::vector<float>& scores,
                                     const std::map<std::string, int32_t>& lookup, std::vector<int32_t> ids) {
  for (;;) {
    float best = -1e10f;
    int32_t best_id = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = lookup.find(pieces[size_t(ids[i])] + pieces[size_t(ids[i + 1])]);
      if (it != lookup.end() && scores[size_t(it->second)] > best) { best = scores[size_t(it->second)]; best_id = it->second; at = i; }
    }
    if (best_id < 0) return ids;
    ids[at] = best_id;
    ids.erase(ids.begin() + long(at) + 1);
  }
}
}  // namespace

TEST(Stories260K, GreedyGenerationMatchesLlama2c) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string e = fx + "/stories260K/expected/";
  EXPECT_EQ(generate_text(converted(fx), "", 200), read_text_file(e + "llama2c_test_all_expected_stdout.txt"));
  EXPECT_EQ(generate_text(converted(fx), "", 256), read_text_file(e + "llama2c_doc_greedy_256steps.txt"));
  // run.c -n 64 with a 5-token prompt = 4 forced + 60 generated tokens.
  EXPECT_EQ(generate_text(converted(fx), "Once upon a time", 60),
            read_text_file(e + "prompt_once_upon_a_time_64steps.txt"));
}

TEST(Stories260K, TokenIdsMatchDerivedFixture) {
  AR_REQUIRE_FIXTURES(fx);
  auto j = read_json_file(fx + "/stories260K/expected/token_ids.derived.json");
  auto tok = load_tokenizer(converted(fx));
  EXPECT_EQ(tok->encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  auto m = HfModel::open(converted(fx));
  Context ctx(Device{}, 2);
  Transformer t(*m, ctx, true);
  const auto& c = j["empty_prompt_200steps"];
  auto ids = generate_greedy(t, c["prompt_token_ids"].get<std::vector<int32_t>>(), 200);
  std::vector<int32_t> gen(ids.begin() + 1, ids.end());
  EXPECT_EQ(gen, c["next_token_ids"].get<std::vector<int32_t>>());
}

TEST(Stories260K, ConvertedLogitsEqualLlama2cReferenceForward) {
  AR_REQUIRE_FIXTURES(fx);
  Llama2cCheckpoint ck = read_llama2c(fx + "/stories260K/stories260K.bin");
  const int64_t T = 500, C = ck.dim, hs = C / ck.n_heads, kv = hs * ck.n_kv_heads, Hd = ck.hidden_dim, V = ck.vocab_size;
  std::vector<int32_t> ids(T);
  for (int64_t i = 0; i < T; ++i) ids[size_t(i)] = int32_t(i == 0 ? 1 : (i * 37 + 11) % V);
  auto d = [](const std::vector<float>& v, size_t off, size_t n) {
    return std::vector<double>(v.begin() + long(off), v.begin() + long(off + n));
  };
  // llama2.c forward in double: adjacent-pair rotary, freq_j = 10000^(-2j/hs).
  std::vector<double> x(size_t(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) x[size_t(t * C + c)] = ck.token_embedding[size_t(ids[size_t(t)] * C + c)];
  auto rope_pairs = [&](std::vector<double>& v, int64_t width) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < width; i += 2) {
        double f = std::pow(10000.0, -double(i % hs) / double(hs)), a = double(t) * f;
        double& x0 = v[size_t(t * width + i)];
        double& x1 = v[size_t(t * width + i + 1)];
        double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = r0;
        x1 = r1;
      }
  };
  for (int64_t l = 0; l < ck.n_layers; ++l) {
    const size_t L = size_t(l);
    std::vector<double> h(x.size()), rs(static_cast<size_t>(T)), q(size_t(T * C)), k(size_t(T * kv)), v(size_t(T * kv)),
        o(size_t(T * C)), lse(size_t(ck.n_heads * T)), att(x.size());
    auto w = d(ck.rms_att, L * C, C);
    ref::rmsnorm_fwd(x.data(), w.data(), h.data(), rs.data(), T, C, 1e-5);
    auto wq = d(ck.wq, L * C * C, C * C), wk = d(ck.wk, L * kv * C, kv * C), wv = d(ck.wv, L * kv * C, kv * C),
         wo = d(ck.wo, L * C * C, C * C);
    ref::linear_fwd<double>(h.data(), wq.data(), nullptr, q.data(), T, C, C);
    ref::linear_fwd<double>(h.data(), wk.data(), nullptr, k.data(), T, C, kv);
    ref::linear_fwd<double>(h.data(), wv.data(), nullptr, v.data(), T, C, kv);
    rope_pairs(q, C);
    rope_pairs(k, kv);
    ref::attention_fwd<double>({1, T, T, ck.n_heads, ck.n_kv_heads, hs}, q.data(), k.data(), v.data(), nullptr,
                               o.data(), lse.data());
    ref::linear_fwd<double>(o.data(), wo.data(), nullptr, att.data(), T, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += att[i];
    auto w2n = d(ck.rms_ffn, L * C, C);
    ref::rmsnorm_fwd(x.data(), w2n.data(), h.data(), rs.data(), T, C, 1e-5);
    auto w1 = d(ck.w1, L * Hd * C, Hd * C), w2 = d(ck.w2, L * C * Hd, C * Hd), w3 = d(ck.w3, L * Hd * C, Hd * C);
    std::vector<double> g(size_t(T * Hd)), u(g.size()), a(g.size()), m(x.size());
    ref::linear_fwd<double>(h.data(), w1.data(), nullptr, g.data(), T, C, Hd);
    ref::linear_fwd<double>(h.data(), w3.data(), nullptr, u.data(), T, C, Hd);
    ref::swiglu_fwd(g.data(), u.data(), a.data(), T * Hd);
    ref::linear_fwd<double>(a.data(), w2.data(), nullptr, m.data(), T, Hd, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
  }
  std::vector<double> h(x.size()), rs(static_cast<size_t>(T)), logits(size_t(T * V));
  auto wf = d(ck.rms_final, 0, C), emb = d(ck.token_embedding, 0, V * C);
  ref::rmsnorm_fwd(x.data(), wf.data(), h.data(), rs.data(), T, C, 1e-5);
  ref::linear_fwd<double>(h.data(), emb.data(), nullptr, logits.data(), T, C, V);

  auto model = HfModel::open(converted(fx));
  Context ctx(Device{}, 2);
  Transformer tf(*model, ctx, false);
  Tensor ours = tf.forward_logits(ids.data(), nullptr, 1, T);
  double max_abs = 0, max_logit = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(double(ours.f32()[i]) - logits[i]));
    max_logit = std::max(max_logit, std::abs(logits[i]));
  }
  // fp32 engine vs double reference: differences are rounding only (~1e-6 of the logit scale).
  EXPECT_LT(max_abs, 2e-5 * max_logit) << "max |diff| " << max_abs << " vs max |logit| " << max_logit;
}

TEST(Stories260K, HeapMergeEqualsRunCQuadraticMerge) {
  AR_REQUIRE_FIXTURES(fx);
  // Rebuild the vocabulary independently from the tokenizer file for the quadratic reference.
  std::string raw = read_text_file(fx + "/stories260K/tok512.bin");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::map<std::string, int32_t> lookup;
  for (size_t off = 4; off < raw.size();) {
    float s;
    int32_t len;
    std::memcpy(&s, raw.data() + off, 4);
    std::memcpy(&len, raw.data() + off + 4, 4);
    pieces.push_back(raw.substr(off + 8, size_t(len)));
    scores.push_back(s);
    lookup.emplace(pieces.back(), int32_t(pieces.size() - 1));
    off += 8 + size_t(len);
  }
  auto tok = Llama2cTokenizer::load(fx + "/stories260K/tok512.bin");
  std::string text = read_text_file(fx + "/text/tinystories/tinystories_sample.txt");
  std::mt19937 rng(3);
  for (int it = 0; it < 40; ++it) {
    size_t at = rng() % (text.size() - 600), n = 1 + rng() % 500;
    while (at > 0 && (uint8_t(text[at]) & 0xC0) == 0x80) --at;  // start on a code point
    std::string s = text.substr(at, n);
    auto ids = tok.encode(s, true, false);
    // Unmerged sequence: BOS, dummy prefix, one id per code point (byte fallback +3).
    std::vector<int32_t> base = {1, lookup.at(" ")};
    for (size_t i = 0; i < s.size();) {
      size_t len = 1;
      while (i + len < s.size() && (uint8_t(s[i + len]) & 0xC0) == 0x80 && len < 4) ++len;
      auto f = lookup.find(s.substr(i, len));
      if (f != lookup.end()) base.push_back(f->second);
      else for (size_t b = 0; b < len; ++b) base.push_back(int32_t(uint8_t(s[i + b])) + 3);
      i += len;
    }
    EXPECT_EQ(ids, quadratic_merge(pieces, scores, lookup, base)) << "text: " << s;
  }
  // Decode round-trips (llama2.c decode drops the dummy-prefix space after BOS).
  std::string s = "Lily saw a big, red ball. \"Wow!\" she said.\nThe end.";
  EXPECT_EQ(tok.decode_all(tok.encode(s, true, false)), s);
}

// convert writes the llama2.c tokenizer also as tokenizer.json (so transformers needs no sentencepiece);
// read back through the Hugging Face BPE path it must encode every text as run.c does.
TEST(Stories260K, ConvertedTokenizerJsonEncodesAsRunC) {
  AR_REQUIRE_FIXTURES(fx);
  auto ref = Llama2cTokenizer::load(fx + "/stories260K/tok512.bin");
  const std::string d = ar::test::temp_path("tokjson");
  std::filesystem::create_directories(d);
  write_file_atomic(d + "/tokenizer.json", llama2c_tokenizer_json(ref));
  write_file_atomic(d + "/tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": true, "add_eos_token": false})");
  auto hf = load_tokenizer(d);
  EXPECT_NE(hf->describe().find("tokenizer.json"), std::string::npos) << hf->describe();
  EXPECT_EQ(hf->bos(), 1);
  EXPECT_EQ(hf->eos(), 2);
  std::string text = read_text_file(fx + "/text/tinystories/tinystories_sample.txt").substr(0, 200000);
  text += read_text_file(fx + "/text/tinyshakespeare/input.txt").substr(0, 50000);
  text += "naïve café 東京 🙂 \t tabs  and   spaces\n";
  EXPECT_EQ(hf->encode(text), ref.encode(text, true, false));
  std::mt19937 rng(5);
  for (int it = 0; it < 200; ++it) {  // short pieces: starts and ends anywhere (on a code point)
    size_t at = rng() % (text.size() - 100), n = 1 + rng() % 60;
    while (at > 0 && (uint8_t(text[at]) & 0xC0) == 0x80) --at;
    while (at + n < text.size() && (uint8_t(text[at + n]) & 0xC0) == 0x80) ++n;
    const std::string s = text.substr(at, n);
    EXPECT_EQ(hf->encode(s), ref.encode(s, true, false)) << "text: '" << s << "'";
  }
  std::filesystem::remove_all(d);
}

TEST(Stories260K, PerplexityIsDeterministicAndSane) {
  AR_REQUIRE_FIXTURES(fx);
  auto m = HfModel::open(converted(fx));
  auto tok = load_tokenizer(converted(fx));
  std::string text = read_text_file(fx + "/text/tinystories/tinystories_sample.txt").substr(0, 12000);
  auto ids = tok->encode(text);
  Context c1(Device{}, 1), c2(Device{}, 2);
  Transformer t1(*m, c1, false), t2(*m, c2, true);
  PplResult a = perplexity(t1, ids, 256, tok->bos(), 1), b = perplexity(t2, ids, 256, tok->bos(), 4);
  EXPECT_EQ(a.tokens_scored, b.tokens_scored);
  // Batching changes GEMM extents, and some OpenBLAS kernels (AMD EPYC) round by extent: fp32 noise only.
  EXPECT_NEAR(a.ppl, b.ppl, 1e-6 * a.ppl);
  EXPECT_EQ(perplexity(t1, ids, 256, tok->bos(), 1).ppl, a.ppl);  // same run twice: same bits
  EXPECT_GT(a.ppl, 2.0);
  EXPECT_LT(a.ppl, 30.0);  // a trained model: far below the uniform 512
  EXPECT_THROW(perplexity(t1, std::vector<int32_t>(100, 5), 256, 1), Error);
}
