// Calibration sampling (quant/calib.h): AutoRound's packing (BOS per sample, documents' own BOS/EOS
// stripped), plain text packed by default and JSONL not, the seqlen clamp, and the notes that say
// what would give more samples. A byte tokenizer (one token per byte) makes every count exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "quant/calib.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace ar::quant {
namespace {

constexpr int32_t kBos = 1, kEos = 2, kOffset = 3;

class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(bool add_eos = false) : add_eos_(add_eos) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(int32_t(c) + kOffset);
    if (add_special && add_eos_) ids.push_back(kEos);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids)
      if (id >= kOffset) s.push_back(char(id - kOffset));
    return s;
  }
  int32_t bos() const override { return kBos; }
  int32_t eos() const override { return kEos; }
  int32_t vocab_size() const override { return 256 + kOffset; }
  std::string describe() const override { return "bytes"; }

 private:
  bool add_eos_;
};

// Varied text (no token repeats more than seqlen/2 times at a sample's end).
std::string text_of(size_t bytes, uint32_t seed) {
  std::string s;
  uint32_t x = seed;
  while (s.size() < bytes) {
    x = x * 1664525u + 1013904223u;
    s.push_back(char('a' + (x >> 24) % 26));
    if ((x >> 8) % 7 == 0) s.push_back(' ');
  }
  s.resize(bytes);
  return s;
}

// A file named `name` (its extension picks plain text or JSONL) in a fresh directory of its own.
std::string write_file(const std::string& name, const std::string& content) {
  const std::string dir = test::temp_path("calib");
  fs::create_directories(dir);
  const std::string p = dir + "/" + name;
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

std::vector<std::vector<int32_t>> samples_of(const CalibData& d) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < d.n; ++i)
    out.emplace_back(d.ids.begin() + i * d.seqlen, d.ids.begin() + (i + 1) * d.seqlen);
  return out;
}

// Where sample `s` (without its BOS) sits in the byte stream of `text`; npos if it is not a window.
size_t find_body(const std::string& text, const std::vector<int32_t>& s, size_t skip_front, size_t skip_back) {
  std::string body;
  for (size_t i = skip_front; i + skip_back < s.size(); ++i) body.push_back(char(s[i] - kOffset));
  return text.find(body);
}

TEST(Calib, PlainTextIsPackedByDefaultWithBosPerSample) {
  const std::string text = text_of(20000, 7);
  const std::string p = write_file("calib_plain.txt", text);
  ByteTokenizer tok;
  CalibOptions o;
  o.dataset = p;
  o.nsamples = 1000;
  o.seqlen = 64;
  CalibData d = build_calibration(tok, o);
  // 20000 body bytes in windows of 63 (64 minus the BOS): floor(20000/63) = 317 samples.
  EXPECT_EQ(d.n, 20000 / 63);
  for (const auto& s : samples_of(d)) {
    ASSERT_EQ(s.size(), 64u);
    EXPECT_EQ(s[0], kBos);
    size_t at = find_body(text, s, 1, 0);
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(at % 63, 0u) << "windows are consecutive, not overlapping";
  }
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("only 317 usable samples of 64 tokens"), std::string::npos) << d.notes[0];
  EXPECT_NE(d.notes[0].find("More text or a smaller --seqlen gives more"), std::string::npos) << d.notes[0];
  fs::remove_all(fs::path(p).parent_path());
}

TEST(Calib, PackingStripsEachDocumentsBosAndEosAndEndsSamplesWithEos) {
  // JSONL with concat=true: documents are truncated to seqlen (as AutoRound's tokenizer does), their
  // own BOS/EOS dropped, and every sample is BOS + 62 body tokens + EOS.
  std::string jsonl;
  std::string all;
  for (int i = 0; i < 40; ++i) {
    std::string doc = text_of(50, 100 + uint32_t(i));
    jsonl += "{\"text\": \"" + doc + "\"}\n";
    all += doc;
  }
  const std::string p = write_file("calib_docs.jsonl", jsonl);
  ByteTokenizer tok(/*add_eos=*/true);
  CalibOptions o;
  o.dataset = p + ":concat=true";
  o.nsamples = 1000;
  o.seqlen = 64;
  CalibData d = build_calibration(tok, o);
  EXPECT_EQ(d.n, 40 * 50 / 62);
  for (const auto& s : samples_of(d)) {
    EXPECT_EQ(s.front(), kBos);
    EXPECT_EQ(s.back(), kEos);
    EXPECT_EQ(std::count(s.begin(), s.end(), kBos), 1);
    EXPECT_NE(find_body(all, s, 1, 1), std::string::npos);
  }
  fs::remove_all(fs::path(p).parent_path());
}

TEST(Calib, JsonlIsNotPackedByDefaultAndTheNoteSuggestsConcat) {
  std::string jsonl;
  for (int i = 0; i < 30; ++i) jsonl += "{\"text\": \"" + text_of(i < 5 ? 100 : 20, uint32_t(i)) + "\"}\n";
  const std::string p = write_file("calib_short.jsonl", jsonl);
  ByteTokenizer tok;
  CalibOptions o;
  o.dataset = p;
  o.nsamples = 8;
  o.seqlen = 64;
  CalibData d = build_calibration(tok, o);
  EXPECT_EQ(d.n, 5);  // only the five 100-byte documents are long enough
  for (const auto& s : samples_of(d)) EXPECT_EQ(std::count(s.begin(), s.end(), kBos), 1);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find(":concat=true (25 of 30 documents are shorter than --seqlen"), std::string::npos)
      << d.notes[0];
  o.dataset = p + ":concat=false";
  EXPECT_EQ(build_calibration(tok, o).n, 5);
  fs::remove_all(fs::path(p).parent_path());
}

TEST(Calib, ExplicitConcatFalseKeepsPlainTextWhole) {
  const std::string p = write_file("calib_whole.txt", text_of(5000, 3));
  ByteTokenizer tok;
  CalibOptions o;
  o.dataset = p + ":concat=false";
  o.nsamples = 4;
  o.seqlen = 64;
  EXPECT_EQ(build_calibration(tok, o).n, 1);  // one document: its first 64 tokens
  fs::remove_all(fs::path(p).parent_path());
}

TEST(Calib, DefaultSeqlenIsClampedToTheContextAndAnExplicitOneIsRefused) {
  ByteTokenizer tok;
  CalibOptions o;  // built-in corpus, 128 x 2048
  o.max_context = 256;
  CalibData d = build_calibration(tok, o);
  EXPECT_EQ(d.seqlen, 256);
  EXPECT_EQ(d.n, 128);
  EXPECT_TRUE(test::any_contains(d.notes, "--seqlen 2048 clamped to the model's context of 256 tokens"));
  o.seqlen_given = true;
  try {
    build_calibration(tok, o);
    ADD_FAILURE() << "an explicit --seqlen beyond the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--seqlen 2048 exceeds max_position_embeddings 256"), std::string::npos)
        << e.what();
  }
}

TEST(Calib, BuiltinCorpusGivesAutoRoundsDefaultAmount) {
  // 128 samples x 2048 tokens even for a one-token-per-byte tokenizer; typical BPE vocabularies
  // need about a quarter of that text.
  ByteTokenizer tok;
  CalibOptions o;
  CalibData d = build_calibration(tok, o);
  EXPECT_EQ(d.n, 128);
  EXPECT_EQ(d.seqlen, 2048);
  EXPECT_GE(builtin_corpus().size(), size_t(1500000));
}

TEST(Calib, NoUsableSampleNamesTheSourceAndWhatToTry) {
  const std::string p = write_file("calib_tiny.jsonl", "{\"text\": \"abc\"}\n");
  ByteTokenizer tok;
  CalibOptions o;
  o.dataset = p;
  o.seqlen = 64;
  try {
    build_calibration(tok, o);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(p + ": no usable calibration sample of 64 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("try :concat=true"), std::string::npos) << m;
  }
  fs::remove_all(fs::path(p).parent_path());
}


// auto_round's token-id datasets: a JSONL field holding an array is the document's ids, used as they
// are (no BOS added, nothing tokenized); a document shorter than seqlen gives no sample, a longer one
// its first seqlen ids; with concat=true they are packed like text.
std::string ids_line(const std::vector<int>& ids, const std::string& field = "input_ids") {
  std::string s = "{\"" + field + "\": [";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]}\n";
}

std::vector<int> varied_ids(int n, int seed) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(kOffset + (i * 7 + seed * 13) % 200);
  return v;
}

TEST(Calib, TokenIdDocumentsAreUsedAsTheyAre) {
  std::string jsonl;
  for (int i = 0; i < 6; ++i) jsonl += ids_line(varied_ids(i < 4 ? 80 : 10, i));
  const std::string p = write_file("calib_ids.jsonl", jsonl);
  ByteTokenizer tok;
  CalibOptions o;
  o.dataset = p + ":field=input_ids";
  o.nsamples = 8;
  o.seqlen = 64;
  CalibData d = build_calibration(tok, o);
  ASSERT_EQ(d.n, 4);  // the two 10-id documents are too short
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 4; ++i) {
    std::vector<int> v = varied_ids(80, i);
    want.emplace_back(v.begin(), v.begin() + 64);
  }
  for (const auto& s : samples_of(d))
    EXPECT_NE(std::find(want.begin(), want.end(), s), want.end()) << "a sample is not a document's first 64 ids";
  EXPECT_TRUE(test::any_contains(d.notes, "2 of 6 documents are shorter than --seqlen")) << d.notes.at(0);

  o.dataset = p + ":field=input_ids:concat=true";  // packed: BOS + 63 body ids per sample
  CalibData packed = build_calibration(tok, o);
  EXPECT_EQ(packed.n, (4 * 64 + 2 * 10) / 63);  // JSONL documents are cut at seqlen before packing
  for (const auto& s : samples_of(packed)) EXPECT_EQ(s.front(), kBos);
  fs::remove_all(fs::path(p).parent_path());
}

TEST(Calib, TokenIdsOutsideTheVocabularyOrNotIntegersAreRefusedWithTheirLine) {
  ByteTokenizer tok;
  CalibOptions o;
  o.seqlen = 4;
  o.vocab_size = 100;  // the model's embedding rows bound the ids, not the tokenizer's 259
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"input_ids\": [5, 6, 100, 7]}", "'input_ids'[2] = 100 is not a token id (an integer from 0 to 99"},
      {"{\"input_ids\": [5, -1]}", "'input_ids'[1] = -1 is not a token id"},
      {"{\"input_ids\": [5, 6.5]}", "'input_ids'[1] = 6.5 is not a token id"},
      {"{\"input_ids\": [5, \"6\"]}", "'input_ids'[1] = \"6\" is not a token id"},
      {"{\"input_ids\": [5, 99999999999]}", "is not a token id"},
      {"{\"input_ids\": 5}", "no string field 'input_ids' (nor an array of token ids)"},
  };
  for (const auto& [line, want] : cases) {
    const std::string p = write_file("calib_bad_ids.jsonl", ids_line(varied_ids(8, 1)) + line + "\n");
    o.dataset = p + ":field=input_ids";
    try {
      build_calibration(tok, o);
      ADD_FAILURE() << "accepted " << line;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
      EXPECT_NE(std::string(e.what()).find(p + ":2: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    fs::remove_all(fs::path(p).parent_path());
  }
}

}  // namespace
}  // namespace ar::quant
