// Tokenizers from llama.cpp GGUF vocabularies (tokenizer.ggml.*). "llama" is SentencePiece-style BPE
// (pieces, scores, types); "gpt2" is byte-level BPE (tokens, merges) whose pre-tokenizer is named by
// tokenizer.ggml.pre. Each name maps to the sequence of regex splits of that family's HF
// tokenizer.json (the same lists llama.cpp uses to emulate them); unknown names are refused.
#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "model/tokenizer/hf_bpe.h"

namespace ar {

namespace {
const char* const kGpt2NoTrailingSpace =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kCjk = "[一-龥ࠀ-一가-퟿]+";

struct PreType {
  std::vector<const char*> names;
  std::vector<std::string> splits;
};

const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> table = {  // immutable lookup table
      {{"default", "gpt2", "gpt-2", "mpt", "olmo", "jais"}, {tok::kGpt2Pattern}},
      {{"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"}, {tok::kLlama3Pattern}},
      {{"qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "stablelm2"}, {tok::kQwen2Pattern}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"}, {"\\p{N}", kGpt2NoTrailingSpace}},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2NoTrailingSpace, "[0-9][0-9][0-9]"}},
      {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}},
      {{"deepseek-llm"},
       {"[\r\n]",
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, "\\p{N}+"}},
  };
  return table;
}

}  // namespace

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_gguf(const std::string& path) {
  GgufFile g = GgufFile::open(path);
  const std::string model = g.string("tokenizer.ggml.model", "");
  Spec s;
  s.source = "GGUF " + model + " vocabulary";
  s.pieces = g.strings("tokenizer.ggml.tokens");
  std::vector<int> types(s.pieces.size(), 1);
  if (const GgufValue* t = g.find("tokenizer.ggml.token_type"); t && t->type == GgufType::Array) {
    if (t->nums.size() != s.pieces.size())
      fail(ErrorKind::InvalidInput, path + ": tokenizer.ggml.token_type has " + std::to_string(t->nums.size()) +
                                        " entries for " + std::to_string(s.pieces.size()) + " tokens");
    for (size_t i = 0; i < types.size(); ++i) {
      const double v = t->nums[i];  // llama.cpp token types 0..6; checked before the conversion to int
      if (!(v >= 0 && v <= 6) || v != double(int(v)))
        fail(ErrorKind::InvalidInput, path + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                                          std::to_string(v) + " is not a token type (0..6)");
      types[i] = int(v);
    }
  }
  // Special ids outside the vocabulary are refused, not dropped (gguf.h: token_id).
  const int64_t vocab = int64_t(s.pieces.size());
  g.check_token_ids(vocab);
  auto id = [&](const char* key) { return int32_t(g.token_id(key, vocab)); };
  const int32_t bos = id("tokenizer.ggml.bos_token_id"), eos = id("tokenizer.ggml.eos_token_id"),
                unk = id("tokenizer.ggml.unknown_token_id");
  if (model == "llama") {
    const GgufValue* sc = g.find("tokenizer.ggml.scores");
    if (!sc || sc->nums.size() != s.pieces.size())
      fail(ErrorKind::InvalidInput, path + ": tokenizer.ggml.scores missing or of the wrong length");
    std::vector<float> scores(sc->nums.begin(), sc->nums.end());
    if (g.number("tokenizer.ggml.add_space_prefix", 1) == 0)
      fail(ErrorKind::Unsupported, path + ": SentencePiece vocabulary without the dummy-prefix space");
    auto t = from_scored_pieces(std::move(s), scores, types, unk, bos, eos, true);
    return t;
  }
  if (model != "gpt2") fail(ErrorKind::Unsupported, path + ": tokenizer.ggml.model '" + model + "' is not supported (gpt2, llama)");
  const std::string pre = g.string("tokenizer.ggml.pre", "default");
  const PreType* found = nullptr;
  for (const auto& p : pre_types())
    for (const char* n : p.names)
      if (pre == n) found = &p;
  if (!found) fail(ErrorKind::Unsupported, path + ": pre-tokenizer '" + pre + "' is not supported");
  s.splits = found->splits;
  for (const auto& m : g.strings("tokenizer.ggml.merges")) {
    size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) fail(ErrorKind::InvalidInput, path + ": bad merge '" + m + "'");
    s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] == 3 || types[i] == 4) s.added.push_back({s.pieces[i], int32_t(i), types[i] == 3});
  s.bos = bos;
  s.eos = eos;
  s.add_bos = g.number("tokenizer.ggml.add_bos_token", 0) != 0;
  return std::make_unique<HfBpeTokenizer>(std::move(s));
}

}  // namespace ar
