// Tokenizer goldens from ../shared/fixtures/tokenizers (skipped when absent):
//  - Hugging Face Python ids (swift-transformers test data): 18 cases per model, one long paragraph,
//    83 multilingual inputs;
//  - llama.cpp's .inp/.out pairs (HF encode with add_special_tokens=False) for every vocabulary
//    whose HF files are in the fixtures.
// Goldens that cannot run, and why, are listed in docs/tokenizers.md.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "core/error.h"
#include "io/json_file.h"
#include "io/mapped_file.h"
#include "model/tokenizer/hf_bpe.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;

namespace {
std::string tok_dir(const std::string& fx, const std::string& name) { return fx + "/tokenizers/" + name; }

const Tokenizer& cached(const std::string& dir) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;  // loading a vocabulary takes ~0.1-1 s
  auto& t = cache[dir];
  if (!t) t = load_tokenizer(dir);
  return *t;
}

// transformers' clean_up_tokenization (applied by decode() in the versions that wrote the older
// goldens): drops the space before punctuation and contractions. Our decode() returns exact text.
std::string cleanup(std::string s) {
  const std::pair<const char*, const char*> rules[] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","},
                                                       {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                                       {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : rules)
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += std::strlen(to)) s.replace(p, std::strlen(from), to);
  return s;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (auto x : v) {
    s += ' ';
    s += std::to_string(x);
  }
  return s;
}
}  // namespace

class HfGolden : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(HfGolden, TokenizerTestsJson) {
  AR_REQUIRE_FIXTURES(fx);
  auto [model_id, dir] = GetParam();
  json j = read_json_file(fx + "/tokenizers/hf-golden/tokenizer_tests.json");
  const Tokenizer& t = cached(tok_dir(fx, dir));
  int n = 0;
  for (const auto& c : j.at(model_id)) {
    std::string in = c["input"];
    auto want = c["encoded"]["input_ids"].get<std::vector<int32_t>>();
    auto got = t.encode(in, true);
    EXPECT_EQ(show(got), show(want)) << model_id << " input: '" << in << "'";
    const std::string want_text = c["decoded_without_special"].get<std::string>();
    const std::string ours = t.decode(got, true);
    EXPECT_TRUE(ours == want_text || cleanup(ours) == want_text) << model_id << " decode: '" << ours << "' vs '" << want_text << "'";
    ++n;
  }
  EXPECT_GE(n, 18);
}

INSTANTIATE_TEST_SUITE_P(Models, HfGolden,
                         ::testing::Values(std::make_pair("distilgpt2", "gpt2"),
                                           std::make_pair("coreml-projects/Llama-2-7b-chat-coreml", "llama2-spm"),
                                           std::make_pair("pcuenq/Llama-3.2-1B-Instruct-tokenizer", "llama3")),
                         [](const auto& p) { return std::string(p.param.second) == "llama2-spm" ? std::string("llama2") : std::string(p.param.second); });

TEST(HfGoldenParagraph, Gpt2Llama2Llama3) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string g = fx + "/tokenizers/hf-golden/";
  for (auto [file, dir] : {std::make_pair("gpt2_encoded_tokens.json", "gpt2"),
                           std::make_pair("llama_encoded.json", "llama2-spm"),
                           std::make_pair("llama_3.2_encoded.json", "llama3")}) {
    json j = read_json_file(g + file);
    const Tokenizer& t = cached(tok_dir(fx, dir));
    auto got = t.encode(j["text"].get<std::string>(), true);
    EXPECT_EQ(show(got), show(j["token_ids"].get<std::vector<int32_t>>())) << file;
    EXPECT_EQ(t.decode(got, false), j["decoded_text"].get<std::string>()) << file;
  }
}

class Multilingual : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(Multilingual, Matches83Inputs) {
  AR_REQUIRE_FIXTURES(fx);
  auto [file, dir] = GetParam();
  const std::string g = fx + "/tokenizers/hf-golden/multilingual/";
  json inputs = read_json_file(g + "inputs.json"), base = read_json_file(g + file);
  std::map<std::string, std::string> text;
  for (const auto& e : inputs) text[e["id"].get<std::string>()] = e["text"].get<std::string>();
  const Tokenizer& t = cached(tok_dir(fx, dir));
  int n = 0;
  for (const auto& e : base["entries"]) {
    const std::string& in = text.at(e["id"].get<std::string>());
    auto got = t.encode(in, true);
    EXPECT_EQ(show(got), show(e["input_ids"].get<std::vector<int32_t>>())) << file << " " << e["id"] << ": '" << in << "'";
    EXPECT_EQ(t.decode(got, true), e["decoded_skip_special"].get<std::string>()) << file << " decode " << e["id"];
    ++n;
  }
  EXPECT_EQ(n, 83);
}

INSTANTIATE_TEST_SUITE_P(Models, Multilingual,
                         ::testing::Values(std::make_pair("gpt2_multilingual.json", "gpt2"),
                                           std::make_pair("qwen2_5_multilingual.json", "qwen2.5"),
                                           std::make_pair("tinyllama_multilingual.json", "llama2-spm")),
                         [](const auto& p) { return std::string(p.param.first).substr(0, 4); });

class LlamaCppVocab : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(LlamaCppVocab, MatchesInpOut) {
  AR_REQUIRE_FIXTURES(fx);
  auto [vocab, dir] = GetParam();
  const std::string base = fx + "/tokenizers/llama.cpp-vocab/ggml-vocab-" + vocab + ".gguf";
  std::string inp = read_text_file(base + ".inp"), out = read_text_file(base + ".out");
  const std::string marker = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t p = 0, q; (q = inp.find(marker, p)) != std::string::npos; p = q + marker.size()) cases.push_back(inp.substr(p, q - p));
  std::vector<std::string> lines;
  for (size_t p = 0, q; (q = out.find('\n', p)) != std::string::npos; p = q + 1) lines.push_back(out.substr(p, q - p));
  ASSERT_EQ(cases.size(), lines.size());
  const Tokenizer& t = cached(tok_dir(fx, dir));
  for (size_t i = 0; i < cases.size(); ++i) {
    auto got = t.encode(cases[i], false);
    std::string want = lines[i];
    while (!want.empty() && want.back() == ' ') want.pop_back();
    EXPECT_EQ(show(got), want) << vocab << " case " << i << ": '" << cases[i] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppVocab,
                         ::testing::Values(std::make_pair("gpt-2", "gpt2"), std::make_pair("llama-spm", "llama2-spm"),
                                           std::make_pair("phi-3", "phi-3-mini"), std::make_pair("llama-bpe", "llama3"),
                                           std::make_pair("qwen2", "qwen2.5"),
                                           std::make_pair("deepseek-r1-qwen", "qwen2.5")),
                         [](const auto& p) {
                           std::string s = p.param.first;
                           for (auto& c : s) if (c == '-') c = '_';
                           return s;
                         });

TEST(Tokenizer, BadInputsAreNamed) {
  AR_REQUIRE_FIXTURES(fx);
  const Tokenizer& t = cached(tok_dir(fx, "gpt2"));
  try {
    t.encode(std::string("ok \xff bad"), true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_tokenizer(fx + "/tokenizers/qwen3"), Error);  // config only: no vocabulary
}

namespace {
// A directory holding only one tokenizer file of a fixture (so load_tokenizer takes that path),
// removed when the returned object goes.
std::unique_ptr<ar::test::TempDir> only_file(const std::string& src, const std::string& name) {
  auto d = std::make_unique<ar::test::TempDir>("tok_" + std::filesystem::path(src).parent_path().filename().string());
  std::filesystem::copy_file(src, d->file(name));
  return d;
}
}  // namespace

TEST(SentencePieceModel, Llama2TokenizerModelMatchesHfGoldens) {
  AR_REQUIRE_FIXTURES(fx);
  auto t = load_tokenizer(only_file(tok_dir(fx, "llama2-spm") + "/tokenizer.model", "tokenizer.model")->path);
  EXPECT_NE(t->describe().find("SentencePiece tokenizer.model"), std::string::npos);
  json j = read_json_file(fx + "/tokenizers/hf-golden/tokenizer_tests.json");
  for (const auto& c : j.at("coreml-projects/Llama-2-7b-chat-coreml"))
    EXPECT_EQ(show(t->encode(c["input"].get<std::string>(), true)), show(c["encoded"]["input_ids"].get<std::vector<int32_t>>()))
        << c["input"];
  const std::string g = fx + "/tokenizers/hf-golden/multilingual/";
  json inputs = read_json_file(g + "inputs.json"), base = read_json_file(g + "tinyllama_multilingual.json");
  std::map<std::string, std::string> text;
  for (const auto& e : inputs) text[e["id"].get<std::string>()] = e["text"].get<std::string>();
  for (const auto& e : base["entries"])
    EXPECT_EQ(show(t->encode(text.at(e["id"].get<std::string>()), true)), show(e["input_ids"].get<std::vector<int32_t>>()))
        << e["id"];
}

TEST(SentencePieceModel, MistralChatGolden118Tokens) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string m = tok_dir(fx, "mistral-7b-v0.1");
  auto t = load_tokenizer(only_file(m + "/tokenizer.model", "tokenizer.model")->path);
  json sample = read_json_file(m + "/golden_no_tools_sample.json");
  std::vector<int32_t> ids = {t->bos()};
  for (const auto& msg : sample["messages"]) {
    std::string role = msg["role"], content = msg["content"];
    auto seg = t->encode(role == "user" ? "[INST] " + content + " [/INST]" : content, false);
    ids.insert(ids.end(), seg.begin(), seg.end());
    if (role == "assistant") ids.push_back(t->eos());
  }
  EXPECT_EQ(show(ids), show(read_json_file(m + "/golden_no_tools_tokens_v1.json")["tokens"].get<std::vector<int32_t>>()));
}

// transformers 5 saves SentencePiece BPE tokenizers with a Metaspace pre-tokenizer (prepend_scheme
// "first", split false) instead of the Prepend/Replace normalizer: the Llama-2 tokenizer rewritten that
// way must encode as the normalizer form does, except that a leading space is not doubled ("first"
// prepends only to a segment that does not start with "▁") and no "▁" follows a special token.
TEST(Tokenizer, MetaspaceSpellingEncodesLikeTheNormalizerSpelling) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string src = tok_dir(fx, "llama2-spm");
  json tj = read_json_file(src + "/tokenizer.json");
  ASSERT_TRUE(tj.contains("normalizer") && !tj["normalizer"].is_null());
  tj["normalizer"] = nullptr;
  tj["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  const ar::test::TempDir dir("tok_metaspace");
  const std::string& d = dir.path;
  { std::ofstream(d + "/tokenizer.json") << tj.dump(); }
  std::filesystem::copy_file(src + "/tokenizer_config.json", d + "/tokenizer_config.json");
  auto legacy = load_tokenizer(src), meta = load_tokenizer(d);
  for (const char* text : {"Hello world", "Hello  world.\nNew line\ttab", "naïve café 東京 🙂", "x=1+2", "a</s>b"})
    EXPECT_EQ(show(meta->encode(text)), show(legacy->encode(text))) << text;
  EXPECT_EQ(show(meta->encode(" Hello", false)), show(legacy->encode("Hello", false)));  // one "▁", not two
  EXPECT_EQ(meta->decode(meta->encode("Hello  world")), "Hello  world");
  tj["pre_tokenizer"]["split"] = true;  // every "▁" starts a word: "a  b" -> "▁a" "▁" "▁b"
  { std::ofstream(d + "/tokenizer.json", std::ios::trunc) << tj.dump(); }
  auto split = load_tokenizer(d);
  const std::vector<int32_t> space = meta->encode(" ", false), b = legacy->encode("b", false);  // "▁", "▁b"
  ASSERT_EQ(space.size(), 1u);
  std::vector<int32_t> want = legacy->encode("a", false);
  want.push_back(space[0]);
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(show(split->encode("a  b", false)), show(want));
}

TEST(Tokenizer, UnsupportedTypesAreNamed) {
  AR_REQUIRE_FIXTURES(fx);
  const ar::test::TempDir dir("tok_bad");
  const std::string& d = dir.path;
  auto expect_error = [&](const json& tj, const std::string& what) {
    { std::ofstream(d + "/tokenizer.json") << tj.dump(); }
    try {
      load_tokenizer(d);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  json base = read_json_file(tok_dir(fx, "gpt2") + "/tokenizer.json");
  json u = base;
  u["model"]["type"] = "Unigram";
  expect_error(u, "model type 'Unigram' is not supported");
  u = base;
  u["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect_error(u, "Metaspace replacement '_' is not supported");
  u["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "sometimes"}};
  expect_error(u, "Metaspace prepend_scheme 'sometimes' is not supported");
  u = base;
  u["normalizer"] = {{"type", "Lowercase"}};
  expect_error(u, "normalizer 'Lowercase' is not supported");
  u = base;
  u["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(u, "does not compile");
  std::filesystem::remove(d + "/tokenizer.json");
  { std::ofstream(d + "/tokenizer.model") << std::string("\x0a\x05\x0a\x03" "abc", 7); }  // one piece, no trainer spec
  try {
    load_tokenizer(d);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("UNIGRAM is not supported"), std::string::npos) << e.what();
  }
  std::filesystem::remove(d + "/tokenizer.model");
  EXPECT_THROW(load_tokenizer(d), Error);  // nothing at all
}

// The same .inp/.out goldens through llama.cpp's vocab-only GGUF files. bert-bge (WordPiece) is the
// one vocabulary with goldens that is not a BPE tokenizer; see docs/tokenizers.md.
class GgufVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocab, MatchesInpOut) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string vocab = GetParam();
  const std::string base = fx + "/tokenizers/llama.cpp-vocab/ggml-vocab-" + vocab + ".gguf";
  std::string inp = read_text_file(base + ".inp"), out = read_text_file(base + ".out");
  const std::string marker = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases, lines;
  for (size_t p = 0, q; (q = inp.find(marker, p)) != std::string::npos; p = q + marker.size()) cases.push_back(inp.substr(p, q - p));
  for (size_t p = 0, q; (q = out.find('\n', p)) != std::string::npos; p = q + 1) lines.push_back(out.substr(p, q - p));
  ASSERT_EQ(cases.size(), lines.size());
  auto t = HfBpeTokenizer::from_gguf(base);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string want = lines[i];
    while (!want.empty() && want.back() == ' ') want.pop_back();
    EXPECT_EQ(show(t->encode(cases[i], false)), want) << vocab << " case " << i << ": '" << cases[i] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GgufVocab,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-coder", "deepseek-llm", "falcon",
                                           "mpt", "refact", "starcoder"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (auto& c : s) if (c == '-') c = '_';
                           return s;
                         });

TEST(GgufVocabErrors, WordPieceAndBadFilesAreRefused) {
  AR_REQUIRE_FIXTURES(fx);
  try {
    HfBpeTokenizer::from_gguf(fx + "/tokenizers/llama.cpp-vocab/ggml-vocab-bert-bge.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model 'bert' is not supported"), std::string::npos) << e.what();
  }
  const ar::test::TempDir dir("tok_gguf");
  const std::string& d = dir.path;
  std::string good = read_text_file(fx + "/tokenizers/llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
  for (size_t cut : {size_t(3), size_t(20), size_t(1000), good.size() / 2}) {
    { std::ofstream(d + "/t.gguf", std::ios::binary) << good.substr(0, cut); }
    try {
      HfBpeTokenizer::from_gguf(d + "/t.gguf");
      ADD_FAILURE() << "no error at cut " << cut;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t.gguf"), std::string::npos) << e.what();
    }
  }
}
