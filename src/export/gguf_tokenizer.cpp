#include "export/gguf_tokenizer.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "io/json_file.h"
#include "io/mapped_file.h"
#include "model/tokenizer/regex_split.h"
#include "model/tokenizer_llama2c.h"

namespace ar {

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
// Largest id taken from a file (as the tokenizer loaders): bounds the id -> piece table.
constexpr int64_t kMaxTokenId = (int64_t(1) << 22) - 1;

struct Added {
  std::string content;
  int64_t id;
  bool special;
};

// What the tokenizer files hold, before it becomes llama.cpp's vocabulary.
struct Source {
  std::vector<std::string> pieces;  // id -> piece; "" where the files have no token
  std::vector<Added> added;
  std::vector<std::string> merges;  // "left right"
  std::string unk_piece;            // tokenizer.json model.unk_token
  bool byte_fallback = false;
  nlohmann::json post_processor;    // tokenizer.json's, for add_bos/add_eos
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

bool is_byte_piece(const std::string& p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

// convert_hf_to_gguf's does_token_look_special: added tokens spelled like control tokens are control
// tokens even when the files do not say "special".
bool looks_special(const std::string& t) {
  auto wrapped = [&](const std::string& a, const std::string& b) {
    return t.size() >= a.size() + b.size() && t.compare(0, a.size(), a) == 0 && t.compare(t.size() - b.size(), b.size(), b) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

void place(std::vector<std::string>& pieces, int64_t id, const std::string& p) {
  if (size_t(id) >= pieces.size()) pieces.resize(size_t(id) + 1);
  pieces[size_t(id)] = p;
}

int64_t token_id(const JsonIn& v) {
  const int64_t id = v.i64();
  if (id < 0 || id > kMaxTokenId) v.bad("token id " + std::to_string(id) + " is outside [0, " + std::to_string(kMaxTokenId) + "]");
  return id;
}

// Merges as llama.cpp stores them: "left right"; a space inside a part (the [a, b] form allows it) is
// written as U+0120, as the converter does.
std::vector<std::string> read_merges(const JsonIn& m) {
  std::vector<std::string> out;
  out.reserve(m.size());
  for (const JsonIn& e : m.elements()) {
    if (e.is_string()) {
      out.push_back(e.str());
    } else if (e.is_array() && e.size() == 2) {
      out.push_back(replace_all(e.at(0).str(), " ", "\xC4\xA0") + " " + replace_all(e.at(1).str(), " ", "\xC4\xA0"));
    } else {
      e.bad("merges entry is neither \"a b\" nor [a, b]");
    }
  }
  return out;
}

// The regex splits of a byte-level pre-tokenizer, in order (as model/tokenizer/hf_bpe.cpp reads them).
void pre_splits(const JsonIn& p, std::vector<std::string>& out, int depth) {
  if (p.is_null()) return;
  if (depth > 8) p.bad("pre-tokenizer Sequences nested too deeply");
  const std::string type = p.str("type", std::string());
  if (type == "Sequence") {
    for (const JsonIn& q : p.at("pretokenizers").elements()) pre_splits(q, out, depth + 1);
  } else if (type == "ByteLevel") {
    if (p.boolean("add_prefix_space", false)) p.bad("GGUF export: ByteLevel add_prefix_space=true is not supported");
    if (p.boolean("use_regex", true)) out.push_back(tok::kGpt2Pattern);
  } else if (type == "Split" && p.at("pattern").has("Regex") && p.str("behavior", "Isolated") == "Isolated" &&
             !p.boolean("invert", false)) {
    out.push_back(p.at("pattern").at("Regex").str());
  } else if (type == "Digits" && p.boolean("individual_digits", false)) {
    out.push_back("\\p{N}");
  } else {
    p.bad("GGUF export: pre-tokenizer '" + type + "' has no llama.cpp counterpart here");
  }
}

// llama.cpp names pre-tokenizers (tokenizer.ggml.pre); its converter finds the name by hashing the
// ids of a probe text. We match the regex splits instead, for the families whose splits llama.cpp's
// named pre-tokenizers reproduce.
std::string pre_name(const std::vector<std::string>& splits, const std::string& file) {
  struct Known {
    const char* name;
    std::vector<std::string> splits;
  };
  const Known known[] = {
      {"gpt-2", {tok::kGpt2Pattern}},
      {"llama-bpe", {tok::kLlama3Pattern}},
      {"qwen2", {tok::kQwen2Pattern}},
      {"smollm", {"\\p{N}", tok::kGpt2Pattern}},
      // DeepSeek-V3 / R1 / V3.1 / V3.2: digit runs of up to 3, then Han / Hiragana / Katakana runs, then words
      // (CR and LF stand in the pattern as the characters, as tokenizer.json's JSON decodes them)
      {"deepseek-v3",
       {"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
        "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
      // o200k (GPT-4o, gpt-oss's o200k_harmony): cased letter runs with an optional contraction, digit runs
      // of up to 3, punctuation runs with trailing newlines or slashes, whitespace
      {"gpt-4o",
       {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
        "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}};
  // CR and LF as characters or as the regex escapes \r, \n (tokenizer.json files spell them either way)
  const auto canonical = [](std::vector<std::string> v) {
    for (std::string& s : v)
      for (size_t i = 0; (i = s.find_first_of("\r\n", i)) != std::string::npos;) s.replace(i, 1, s[i] == '\r' ? "\\r" : "\\n");
    return v;
  };
  for (const auto& k : known)
    if (canonical(k.splits) == canonical(splits)) return k.name;
  fail(ErrorKind::Unsupported, file + ": GGUF export: the pre-tokenizer matches none of llama.cpp's gpt-2, llama-bpe, "
                                      "qwen2, smollm, deepseek-v3, gpt-4o");
}

bool is_sentencepiece(const JsonIn& j, const std::string& file) {
  std::vector<JsonIn> norms;
  if (j.has("normalizer")) {
    const JsonIn n = j.at("normalizer");
    if (n.str("type", std::string()) == "Sequence") norms = n.at("normalizers").elements();
    else norms.push_back(n);
  }
  bool spm = j.has("pre_tokenizer") && j.at("pre_tokenizer").str("type", std::string()) == "Metaspace";
  for (const JsonIn& n : norms) {
    const std::string t = n.str("type", std::string());
    if (t == "Prepend" || t == "Replace") spm = true;
    else if (t != "NFC") fail(ErrorKind::Unsupported, file + ": GGUF export: normalizer '" + t + "' is not supported");
  }
  return spm;
}

Source read_tokenizer_json(const JsonIn& j) {
  Source s;
  const JsonIn m = j.at("model");
  if (m.str("type", std::string("BPE")) != "BPE") m.bad("GGUF export: model type '" + m.at("type").str() + "' is not BPE");
  const JsonIn vocab = m.at("vocab");
  if (!vocab.is_object()) vocab.bad("must be an object");
  for (auto it = vocab.json().begin(); it != vocab.json().end(); ++it) place(s.pieces, token_id(vocab.at(it.key())), it.key());
  s.merges = read_merges(m.at("merges"));
  s.byte_fallback = m.boolean("byte_fallback", false);
  if (m.has("unk_token") && m.at("unk_token").is_string()) s.unk_piece = m.at("unk_token").str();
  if (j.has("added_tokens"))
    for (const JsonIn& a : j.at("added_tokens").elements())
      s.added.push_back({a.at("content").str(), token_id(a.at("id")), a.boolean("special", false)});
  if (j.has("post_processor")) s.post_processor = j.at("post_processor").json();
  return s;
}

// tokenizer_config.json's added_tokens_decoder (the vocab.json + merges.txt layout has no other list).
void read_added_decoder(Source& s, const JsonIn& cfg) {
  if (!cfg.has("added_tokens_decoder") || !cfg.at("added_tokens_decoder").is_object()) return;
  const JsonIn dec = cfg.at("added_tokens_decoder");
  for (auto it = dec.json().begin(); it != dec.json().end(); ++it) {
    const JsonIn e = dec.at(it.key());
    if (it.key().empty() || it.key().size() > 9 || it.key().find_first_not_of("0123456789") != std::string::npos)
      e.bad("key is not a token id");
    const int64_t id = std::stoll(it.key());
    if (id > kMaxTokenId) e.bad("token id " + it.key() + " is too large");
    const bool known = std::any_of(s.added.begin(), s.added.end(), [&](const Added& a) { return a.id == id; });
    if (!known) s.added.push_back({e.at("content").str(), id, e.boolean("special", false)});
  }
}

Source read_vocab_merges(const std::string& dir, const JsonIn& cfg) {
  Source s;
  const std::string vpath = dir + "/vocab.json", mpath = dir + "/merges.txt";
  const nlohmann::json v = read_json_file(vpath);
  const JsonIn vocab(v, vpath);
  if (!vocab.is_object()) vocab.bad("must be an object");
  for (auto it = v.begin(); it != v.end(); ++it) place(s.pieces, token_id(vocab.at(it.key())), it.key());
  std::istringstream in(read_text_file(mpath));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ', 1);
    if (sp == std::string::npos) fail(ErrorKind::InvalidInput, mpath + ": bad merge line '" + line + "'");
    s.merges.push_back(line);
  }
  read_added_decoder(s, cfg);
  return s;
}

const Added* added_at(const Source& s, int64_t id) {
  for (const auto& a : s.added)
    if (a.id == id) return &a;
  return nullptr;
}

size_t padded_size(const Source& s, int64_t vocab_size, const std::string& file) {
  size_t n = s.pieces.size();
  for (const auto& a : s.added) n = std::max(n, size_t(a.id) + 1);
  if (vocab_size > 0 && n > size_t(vocab_size))
    fail(ErrorKind::InvalidInput, file + ": the tokenizer has " + std::to_string(n) + " tokens but config.json's vocab_size is " +
                                      std::to_string(vocab_size));
  return std::max(n, size_t(std::max<int64_t>(vocab_size, 0)));
}

// Byte-level BPE, as convert_hf_to_gguf's get_vocab_base: added tokens are control (special or
// looking special) or user-defined, ids without a token become unused "[PAD<id>]".
void fill_gpt2(GgufVocab& v, const Source& s, int64_t vocab_size) {
  const size_t n = padded_size(s, vocab_size, v.source);
  v.model = "gpt2";
  for (size_t i = 0; i < n; ++i) {
    const Added* a = added_at(s, int64_t(i));
    const std::string piece = a ? a->content : i < s.pieces.size() ? s.pieces[i] : std::string();
    if (piece.empty()) {
      v.tokens.push_back("[PAD" + std::to_string(i) + "]");
      v.types.push_back(kUnused);
    } else if (a && (a->special || looks_special(piece))) {
      v.tokens.push_back(piece);
      v.types.push_back(kControl);
    } else {
      v.tokens.push_back(a ? replace_all(piece, kSpace, " ") : piece);  // user-defined spaces pre-normalized
      v.types.push_back(a ? kUserDefined : kNormal);
    }
  }
  v.merges = s.merges;
}

// SentencePiece-style BPE from tokenizer.json. llama.cpp merges the adjacent pair whose merged piece
// has the highest score; HF merges the pair of lowest merge rank. A merged piece's score is minus
// (1 + the first rank that produces it), so both pick the same pair. Pieces no merge produces rank
// below every merge; byte, unknown and control pieces score 0 and added tokens -1000, as the
// converter writes them.
void fill_llama_from_json(GgufVocab& v, const Source& s, int64_t vocab_size) {
  const size_t n = padded_size(s, vocab_size, v.source);
  std::unordered_map<std::string, size_t> rank;
  for (size_t r = 0; r < s.merges.size(); ++r) {
    const std::string& m = s.merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp != std::string::npos) rank.emplace(m.substr(0, sp) + m.substr(sp + 1), r);
  }
  v.model = "llama";
  v.pre = "default";
  for (size_t i = 0; i < n; ++i) {
    const Added* a = added_at(s, int64_t(i));
    const bool in_vocab = i < s.pieces.size() && !s.pieces[i].empty();
    std::string piece = in_vocab ? s.pieces[i] : a ? a->content : std::string();
    int32_t type = kNormal;
    float score = 0;
    if (piece.empty()) {
      piece = "[PAD" + std::to_string(i) + "]";
      type = kUnused;
      score = -1000;
    } else if (piece == s.unk_piece) {
      type = kUnknown;
    } else if (a && (a->special || looks_special(piece))) {
      type = kControl;
      score = in_vocab ? 0 : -1000;
    } else if (a) {
      piece = replace_all(piece, kSpace, " ");  // user-defined spaces pre-normalized, as the converter
      type = kUserDefined;
      score = -1000;
    } else if (s.byte_fallback && is_byte_piece(piece)) {
      type = kByte;
    } else {
      auto r = rank.find(piece);
      score = r != rank.end() ? -float(r->second + 1) : -float(s.merges.size() + 1 + i);
    }
    v.tokens.push_back(piece);
    v.types.push_back(type);
    v.scores.push_back(score);
  }
}

// llama2.c tokenizer.bin: pieces spell "▁" as " "; ids 0/1/2 are <unk>/<s>/</s> (the file holds
// "\n<s>\n" for 1 and 2); the scores are the SentencePiece scores the model was trained with.
void fill_llama2c(GgufVocab& v, const std::string& path, int64_t vocab_size) {
  const Llama2cTokenizer tok = Llama2cTokenizer::load(path);
  if (vocab_size > 0 && tok.vocab_size() != vocab_size)
    fail(ErrorKind::InvalidInput, path + ": " + std::to_string(tok.vocab_size()) + " tokens but config.json's vocab_size is " +
                                      std::to_string(vocab_size));
  const char* const special[] = {"<unk>", "<s>", "</s>"};
  v.model = "llama";
  v.pre = "default";
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    const std::string piece = i < 3 ? special[i] : replace_all(tok.piece(i), " ", kSpace);
    v.tokens.push_back(piece);
    v.scores.push_back(tok.score(i));
    v.types.push_back(i == 0 ? kUnknown : i < 3 ? kControl : is_byte_piece(piece) ? kByte : kNormal);
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
}

// The id of a tokenizer_config.json "<typ>_token" (a string or {"content": ...}): an added token
// first, as llama.cpp's SpecialVocab looks it up, then any token.
int64_t config_token_id(const JsonIn& cfg, const std::string& key, const GgufVocab& v, const Source& s) {
  if (!cfg.has(key)) return -1;
  const JsonIn e = cfg.at(key);
  const std::string name = e.is_string() ? e.str() : e.is_object() ? e.str("content", std::string()) : std::string();
  if (name.empty()) return -1;
  for (const auto& a : s.added)
    if (a.content == name) return a.id;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == name) return int64_t(i);
  return -1;
}

// add_bos/add_eos from a TemplateProcessing post-processor (alone or inside a Sequence), as
// SpecialVocab reads it: a special token first in "single" is added BOS, one last is added EOS.
void read_post_processor(GgufVocab& v, const nlohmann::json& pp) {
  if (!pp.is_object()) return;
  const auto list = pp.find("processors");
  const nlohmann::json procs = list != pp.end() && list->is_array() ? *list : nlohmann::json::array({pp});
  for (const auto& p : procs) {
    if (!p.is_object() || p.value("type", std::string()) != "TemplateProcessing") continue;
    const auto single = p.find("single");
    if (single == p.end() || !single->is_array() || single->size() < 2) continue;
    auto special = [](const nlohmann::json& e) { return e.is_object() && e.contains("SpecialToken"); };
    v.add_bos = special(single->front());
    if (special(single->back())) v.add_eos = true;
  }
}

void read_chat_template(GgufVocab& v, const std::string& dir, const JsonIn& cfg) {
  if (cfg.has("chat_template")) {
    const JsonIn t = cfg.at("chat_template");
    if (t.is_string()) {
      v.chat_template = t.str();
      return;
    }
    if (t.is_array())  // named templates: llama.cpp's default is the one named "default"
      for (const JsonIn& e : t.elements())
        if (e.str("name", std::string()) == "default") v.chat_template = e.at("template").str();
    return;
  }
  if (file_exists(dir + "/chat_template.jinja")) v.chat_template = read_text_file(dir + "/chat_template.jinja");
}

void read_specials(GgufVocab& v, const std::string& dir, const Source& s) {
  read_post_processor(v, s.post_processor);
  const std::string cpath = dir + "/tokenizer_config.json";
  const nlohmann::json cj = file_exists(cpath) ? read_json_file(cpath) : nlohmann::json::object();
  const JsonIn cfg(cj, cpath);
  if (!cfg.is_object()) cfg.bad("must be an object");
  struct Slot {
    const char* name;
    int64_t* id;
  };
  const Slot slots[] = {{"bos", &v.bos}, {"eos", &v.eos}, {"unk", &v.unk}, {"pad", &v.pad}};
  for (const auto& sl : slots)
    if (*sl.id < 0) *sl.id = config_token_id(cfg, std::string(sl.name) + "_token", v, s);
  if (cfg.has("add_bos_token") && cfg.at("add_bos_token").json().is_boolean()) v.add_bos = cfg.at("add_bos_token").boolean();
  if (cfg.has("add_eos_token") && cfg.at("add_eos_token").json().is_boolean()) v.add_eos = cfg.at("add_eos_token").boolean();
  read_chat_template(v, dir, cfg);
  const std::string mpath = dir + "/config.json";  // ids the tokenizer files leave unset
  if (!file_exists(mpath)) return;
  const nlohmann::json mj = read_json_file(mpath);
  for (const auto& sl : slots) {
    const std::string key = std::string(sl.name) + "_token_id";
    if (*sl.id < 0 && mj.is_object() && mj.contains(key) && mj[key].is_number_integer() && mj[key].get<int64_t>() >= 0)
      *sl.id = mj[key].get<int64_t>();
  }
}
}  // namespace

GgufVocab read_gguf_vocab(const std::string& dir, int64_t vocab_size) {
  GgufVocab v;
  Source s;
  const std::string cpath = dir + "/tokenizer_config.json";
  const nlohmann::json cj = file_exists(cpath) ? read_json_file(cpath) : nlohmann::json::object();
  if (file_exists(dir + "/tokenizer.bin")) {
    v.source = dir + "/tokenizer.bin";
    fill_llama2c(v, v.source, vocab_size);
  } else if (file_exists(dir + "/tokenizer.json")) {
    v.source = dir + "/tokenizer.json";
    const nlohmann::json tj = read_json_file(v.source);
    const JsonIn j(tj, v.source);
    s = read_tokenizer_json(j);
    if (is_sentencepiece(j, v.source)) {
      fill_llama_from_json(v, s, vocab_size);
      const JsonIn pre = j.opt("pre_tokenizer");
      if (!pre.is_null() && pre.str("type", std::string()) == "Metaspace" && pre.str("prepend_scheme", "always") == "never")
        v.add_space_prefix = false;
    } else {
      std::vector<std::string> splits;
      pre_splits(j.opt("pre_tokenizer"), splits, 0);
      v.pre = pre_name(splits, v.source);
      fill_gpt2(v, s, vocab_size);
    }
  } else if (file_exists(dir + "/vocab.json") && file_exists(dir + "/merges.txt")) {
    v.source = dir + "/vocab.json";
    s = read_vocab_merges(dir, JsonIn(cj, cpath));
    const bool qwen = cj.is_object() && cj.value("tokenizer_class", std::string()).rfind("Qwen2Tokenizer", 0) == 0;
    v.pre = qwen ? "qwen2" : "gpt-2";
    fill_gpt2(v, s, vocab_size);
  } else {
    fail(ErrorKind::Unsupported, dir + ": GGUF export needs tokenizer.json, vocab.json + merges.txt or the llama2.c "
                                       "tokenizer.bin (a tokenizer.model alone is not supported)");
  }
  read_specials(v, dir, s);
  return v;
}

void add_gguf_vocab(GgufWriter& w, const GgufVocab& v) {
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_array("tokenizer.ggml.tokens", v.tokens);
  if (v.model == "llama") w.add_array("tokenizer.ggml.scores", v.scores);
  w.add_array("tokenizer.ggml.token_type", v.types);
  if (v.model == "gpt2") w.add_array("tokenizer.ggml.merges", v.merges);
  const std::pair<const char*, int64_t> ids[] = {{"tokenizer.ggml.bos_token_id", v.bos},
                                                 {"tokenizer.ggml.eos_token_id", v.eos},
                                                 {"tokenizer.ggml.unknown_token_id", v.unk},
                                                 {"tokenizer.ggml.padding_token_id", v.pad}};
  for (const auto& [key, id] : ids)
    if (id >= 0 && size_t(id) < v.tokens.size()) w.add_u32(key, uint32_t(id));
  if (v.add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos) w.add_bool("tokenizer.ggml.add_eos_token", *v.add_eos);
  if (v.add_space_prefix) w.add_bool("tokenizer.ggml.add_space_prefix", *v.add_space_prefix);
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);
}

}  // namespace ar
