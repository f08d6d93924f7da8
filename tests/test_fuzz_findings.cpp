// One test per parser defect found by fuzzing (fuzz/, docs/reliability.md "Fuzzing") or by the
// review of unchecked JSON access that went with it. Each feeds the offending input to the parser
// and asserts a one-line ar::Error naming the file and the key, where there was an abort, a
// sanitizer report, a foreign exception or an unbounded allocation before the fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/llama2c.h"
#include "model/config.h"
#include "model/tokenizer/hf_bpe.h"
#include "model/tokenizer/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using ar::test::TempDir;

// A minimal valid byte-level tokenizer.json ("a", "b", "ab").
json tiny_tokenizer() {
  return json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
                         "added_tokens": [{"id": 3, "content": "<s>", "special": true}],
                         "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}})");
}

// Loads tokenizer.json `j` and expects an ar::Error whose message contains every one of `parts`.
void expect_refused(const json& j, std::initializer_list<const char*> parts) {
  TempDir d("fuzz_findings");
  const std::string path = d.write("tokenizer.json", j.dump());
  try {
    ar::HfBpeTokenizer::from_tokenizer_json(path, json::object());
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const ar::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace

TEST(FuzzFindings, TinyTokenizerLoads) {
  TempDir d("fuzz_findings");
  auto t = ar::HfBpeTokenizer::from_tokenizer_json(d.write("tokenizer.json", tiny_tokenizer().dump()), json::object());
  EXPECT_EQ(t->encode("ab", false), std::vector<int32_t>{2});
}

// Was: const operator[] on a missing key (nlohmann assertion, abort) in the normalizer handling.
TEST(FuzzFindings, ReplaceNormalizerWithoutPattern) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = nullptr;
  j["normalizer"] = {{"type", "Replace"}, {"content", "x"}};
  expect_refused(j, {"normalizer.pattern", "missing"});
}

TEST(FuzzFindings, SequenceNormalizerWithoutList) {
  json j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Sequence"}};
  expect_refused(j, {"normalizer.normalizers", "missing"});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", 7}};
  expect_refused(j, {"normalizer.normalizers", "must be an array"});
}

TEST(FuzzFindings, PreTokenizerWithoutMembers) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"}};
  expect_refused(j, {"pre_tokenizer.pretokenizers", "missing"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"behavior", "Isolated"}};
  expect_refused(j, {"pre_tokenizer.pattern", "missing"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", 5}}}};
  expect_refused(j, {"pre_tokenizer.pattern.Regex", "must be a string"});
}

TEST(FuzzFindings, PostProcessorSpecialTokenWithoutId) {
  json j = tiny_tokenizer();
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"type_id", 0}}}}}}};
  expect_refused(j, {"post_processor.single[0].SpecialToken.id", "missing"});
}

// Was: a negative added-token id indexed is_special_ out of bounds (heap overflow); a huge one sized
// the id -> piece table to 2^31 entries.
TEST(FuzzFindings, TokenIdsOutOfRange) {
  json j = tiny_tokenizer();
  j["added_tokens"][0]["id"] = -1;
  expect_refused(j, {"added_tokens[0].id", "outside"});
  j = tiny_tokenizer();
  j["model"]["vocab"]["b"] = 2147483647;
  expect_refused(j, {"model.vocab.b", "outside"});
  j = tiny_tokenizer();
  j["model"]["vocab"]["b"] = "1";
  expect_refused(j, {"model.vocab.b", "must be an integer"});
}

TEST(FuzzFindings, WrongTypesNameTheKey) {
  json j = tiny_tokenizer();
  j["model"]["merges"] = json::array({json::array({"a", 1})});
  expect_refused(j, {"model.merges[0][1]", "must be a string"});
  j = tiny_tokenizer();
  j["model"]["byte_fallback"] = "yes";
  expect_refused(j, {"model.byte_fallback", "must be true or false"});
  j = tiny_tokenizer();
  j["added_tokens"] = {{{"id", 3}}};
  expect_refused(j, {"added_tokens[0].content", "missing"});
}

// Was: std::stol on the keys of tokenizer_config.json's added_tokens_decoder threw
// std::invalid_argument (not ar::Error: the CLI reported an internal error).
TEST(FuzzFindings, AddedTokensDecoderKeyNotAnId) {
  TempDir d("fuzz_findings");
  d.write("tokenizer.json", tiny_tokenizer().dump());
  d.write("tokenizer_config.json", R"({"added_tokens_decoder": {"x1": {"content": "<pad>"}}})");
  try {
    ar::load_tokenizer(d.path);
    ADD_FAILURE() << "accepted";
  } catch (const ar::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: added_tokens_decoder.x1"), std::string::npos) << e.what();
  }
}

// Was: std::stol on a tiktoken rank after the first line threw std::invalid_argument.
TEST(FuzzFindings, TiktokenRankNotANumber) {
  TempDir d("fuzz_findings");
  d.write("tokenizer.model", "IQ== 0\nIg== x\n");
  try {
    ar::load_tokenizer(d.path);
    ADD_FAILURE() << "accepted";
  } catch (const ar::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: rank 'x'"), std::string::npos) << e.what();
  }
}

namespace {
// A llama2.c checkpoint of the 7-int header `h` followed by `floats` zero floats.
std::string llama2c_file(const TempDir& d, const int32_t (&h)[7], size_t floats) {
  std::string bytes(28 + floats * 4, '\0');
  std::memcpy(bytes.data(), h, 28);
  return d.write("model.bin", bytes);
}

void expect_llama2c_refused(const std::string& path, const char* part) {
  try {
    ar::read_llama2c(path);
    ADD_FAILURE() << "accepted";
  } catch (const ar::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}
}  // namespace

// Was: vocab_size = -h[5] with h[5] = INT32_MIN (signed overflow, UBSan).
TEST(FuzzFindings, Llama2cVocabInt32Min) {
  TempDir d("fuzz_findings");
  const int32_t h[7] = {8, 16, 1, 2, 2, INT32_MIN, 4};
  expect_llama2c_refused(llama2c_file(d, h, 0), "implausible header field 5");
}

// Was: sizes such as n_layers * dim * dim formed in size_t without a bound could wrap around, so a
// small file could pass the size check and be read past its end. Now every product of three header
// fields is checked against the file size before it is formed.
TEST(FuzzFindings, Llama2cSizesCannotWrap) {
  TempDir d("fuzz_findings");
  const int32_t h[7] = {1 << 24, 1 << 24, 1 << 24, 1 << 23, 1 << 23, 1, 1};
  expect_llama2c_refused(llama2c_file(d, h, 64), "truncated");
  const int32_t ok[7] = {8, 16, 1, 2, 2, 4, 4};  // exactly the floats the header implies
  const size_t V = 4, D = 8, H = 16, L = 1, kv = 8, hs = 4;
  const size_t n = V * D + L * D * 2 + L * D * D * 2 + L * kv * D * 2 + L * H * D * 3 + D + 4 * hs;
  EXPECT_EQ(ar::read_llama2c(llama2c_file(d, ok, n)).wq.size(), D * D);
  expect_llama2c_refused(llama2c_file(d, ok, n - 1), "truncated");
}

namespace {
json tiny_config() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
                         "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 300})");
}

void expect_config_refused(const json& j, std::initializer_list<const char*> parts) {
  try {
    ar::parse_model_config(j, "m/config.json");
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const ar::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("m/config.json"), std::string::npos) << msg;
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}
}  // namespace

// Was: quantization_config.bits = 1e300 converted to int by nlohmann's value<int>() (float-cast
// overflow, UBSan); likewise rope_scaling.original_max_position_embeddings to int64.
TEST(FuzzFindings, ConfigNumbersOutOfRange) {
  json j = tiny_config();
  j["quantization_config"] = {{"quant_method", "auto-round"}, {"packing_format", "auto_round:auto_gptq"}, {"bits", 1e300}};
  expect_config_refused(j, {"quantization_config.bits", "must be an integer"});
  j["quantization_config"]["bits"] = int64_t(1) << 40;
  expect_config_refused(j, {"quantization_config.bits", "out of range"});
  j = tiny_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 1e300}};
  expect_config_refused(j, {"rope_scaling.original_max_position_embeddings"});
  j["rope_scaling"]["original_max_position_embeddings"] = 8192.5;
  expect_config_refused(j, {"rope_scaling.original_max_position_embeddings", "whole number"});
  j["rope_scaling"]["original_max_position_embeddings"] = 8192;
  EXPECT_EQ(ar::parse_model_config(j, "m/config.json").rope_scaling.original_max_position_embeddings, 8192);
}

// Was: one line "[json.exception.type_error.302] type must be boolean, but is string" that named no field.
TEST(FuzzFindings, ConfigWrongTypesNameTheField) {
  json j = tiny_config();
  j["tie_word_embeddings"] = "yes";
  expect_config_refused(j, {"tie_word_embeddings", "must be true or false"});
  j = tiny_config();
  j["attention_bias"] = 1;
  expect_config_refused(j, {"attention_bias", "must be true or false"});
  j = tiny_config();
  j["hidden_act"] = 3;
  expect_config_refused(j, {"hidden_act", "must be a string"});
  j = tiny_config();
  j["rope_scaling"] = {{"rope_type", 3}};
  expect_config_refused(j, {"rope_scaling.rope_type", "must be a string"});
}

// Was: tokenizer.ggml.token_type stored as F64 with 1e300 was converted to int unchecked (float-cast
// overflow, UBSan). The reproducer is the committed fuzz regression input.
TEST(FuzzFindings, GgufTokenTypeOutOfRange) {
  const std::string path = std::string(AR_SOURCE_DIR) + "/fuzz/regressions/gguf/token_type_f64_1e300.gguf";
  try {
    ar::HfBpeTokenizer::from_gguf(path);
    ADD_FAILURE() << "accepted";
  } catch (const ar::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.token_type[1]"), std::string::npos) << e.what();
  }
  // The hand-made seeds next to it are valid vocabularies.
  for (const char* seed : {"gpt2_f32_types.gguf", "llama_spm_tiny.gguf"}) {
    auto t = ar::HfBpeTokenizer::from_gguf(std::string(AR_SOURCE_DIR) + "/fuzz/corpus/gguf/" + seed);
    EXPECT_FALSE(t->encode("ab", false).empty()) << seed;
  }
}
