#include "model/tokenizer/hf_bpe.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "io/json_file.h"
#include "io/mapped_file.h"

namespace ar {

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581 "▁"

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  fail(ErrorKind::Unsupported, path + ": " + what + " is not supported");
}

// Largest token id accepted from a file: far above real vocabularies (~260K), small enough that the
// id -> piece table stays bounded for a lying file.
constexpr int64_t kMaxTokenId = (int64_t(1) << 22) - 1;

int32_t token_id_in_range(const JsonIn& v) {
  const int64_t id = v.i64();
  if (id < 0 || id > kMaxTokenId) v.bad("token id " + std::to_string(id) + " is outside [0, " + std::to_string(kMaxTokenId) + "]");
  return int32_t(id);
}

// tokenizer_config.json next to `tokenizer_path` (for error messages).
std::string config_name(const std::string& tokenizer_path) {
  const size_t slash = tokenizer_path.find_last_of('/');
  return (slash == std::string::npos ? std::string() : tokenizer_path.substr(0, slash + 1)) + "tokenizer_config.json";
}

// Applies tokenizer_config.json: BOS/EOS names, add_bos_token, added_tokens_decoder.
void apply_config(HfBpeTokenizer::Spec& s, const nlohmann::json& json, const std::string& file) {
  if (!json.is_object()) return;
  const JsonIn cfg(json, file);
  if (cfg.has("added_tokens_decoder") && cfg.at("added_tokens_decoder").is_object()) {
    const JsonIn dec = cfg.at("added_tokens_decoder");
    for (auto it = dec.json().begin(); it != dec.json().end(); ++it) {
      const JsonIn entry = dec.at(it.key());
      const std::string& key = it.key();
      if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos)
        entry.bad("key is not a token id");
      const int32_t id = int32_t(std::stol(key));
      if (id > kMaxTokenId) entry.bad("token id " + key + " is too large");
      std::string content = entry.str("content", std::string());
      bool special = entry.boolean("special", false);
      if (content.empty()) continue;
      bool known = std::any_of(s.added.begin(), s.added.end(), [&](const auto& a) { return a.id == id; });
      if (!known) s.added.push_back({content, id, special});
    }
  }
  auto token_id = [&](const char* key) -> int32_t {
    if (!cfg.has(key)) return -1;
    const JsonIn v = cfg.at(key);
    std::string name = v.is_string() ? v.str() : v.str("content", std::string());
    for (const auto& a : s.added)
      if (a.content == name) return a.id;
    for (size_t i = 0; i < s.pieces.size(); ++i)
      if (s.pieces[i] == name) return int32_t(i);
    return -1;
  };
  if (int32_t b = token_id("bos_token"); b >= 0) s.bos = b;
  if (int32_t e = token_id("eos_token"); e >= 0) s.eos = e;
  if (cfg.has("add_bos_token") && cfg.at("add_bos_token").json().is_boolean()) s.add_bos = cfg.at("add_bos_token").boolean();
  const JsonIn cls = cfg.opt("tokenizer_class");
  if (cls.is_string() && cls.str().rfind("Qwen2Tokenizer", 0) == 0) {
    s.nfc = true;
    s.splits = {tok::kQwen2Pattern};
  }
}

void place(std::vector<std::string>& pieces, int32_t id, const std::string& p) {
  if (id < 0) return;
  if (size_t(id) >= pieces.size()) pieces.resize(size_t(id) + 1);
  pieces[size_t(id)] = p;
}

std::vector<std::pair<std::string, std::string>> parse_merges_json(const JsonIn& m) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(m.size());
  for (const JsonIn& e : m.elements()) {
    if (e.is_string()) {
      const std::string s = e.str();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) e.bad("bad merge '" + s + "'");
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2) {
      out.emplace_back(e.at(0).str(), e.at(1).str());
    } else {
      e.bad("merges entry is neither \"a b\" nor [a, b]");
    }
  }
  return out;
}

// Walks a pre_tokenizer description and records what we support; anything else is refused by name.
void read_pretokenizer(HfBpeTokenizer::Spec& s, const JsonIn& p, const std::string& path, int depth = 0) {
  if (p.is_null()) return;
  if (depth > 8) p.bad("pre-tokenizer Sequences nested too deeply");
  std::string type = p.str("type", std::string());
  if (type == "Sequence") {
    for (const JsonIn& q : p.at("pretokenizers").elements()) read_pretokenizer(s, q, path, depth + 1);
  } else if (type == "ByteLevel") {
    if (p.boolean("add_prefix_space", false)) unsupported(path, "ByteLevel add_prefix_space=true");
    if (p.boolean("use_regex", true)) s.splits.push_back(tok::kGpt2Pattern);
  } else if (type == "Split") {
    const JsonIn pat = p.at("pattern");
    if (!pat.has("Regex")) unsupported(path, "Split with a string pattern");
    std::string behavior = p.str("behavior", std::string("Isolated"));
    if (behavior != "Isolated") unsupported(path, "Split behavior '" + behavior + "'");
    if (p.boolean("invert", false)) unsupported(path, "Split invert=true");
    s.splits.push_back(pat.at("Regex").str());
  } else if (type == "Digits") {
    if (!p.boolean("individual_digits", false)) unsupported(path, "Digits individual_digits=false");
    s.splits.push_back("\\p{N}");
  } else {
    unsupported(path, "pre-tokenizer '" + type + "'");
  }
}

// transformers 5's spelling of SentencePiece BPE: spaces -> "▁" and the "▁" prefix in the pre-tokenizer.
void read_metaspace(HfBpeTokenizer::Spec& s, const JsonIn& p, const std::string& path) {
  if (p.str("replacement", std::string(kSpace)) != kSpace)
    unsupported(path, "Metaspace replacement '" + p.at("replacement").str() + "'");
  s.kind = HfBpeTokenizer::Kind::SentencePiece;
  // Older files spell the scheme as add_prefix_space (true: always).
  const std::string scheme = p.str("prepend_scheme", std::string(p.boolean("add_prefix_space", true) ? "always" : "never"));
  if (scheme == "first") s.prepend = HfBpeTokenizer::Prepend::First;
  else if (scheme == "always") s.prepend = HfBpeTokenizer::Prepend::Always;
  else if (scheme == "never") s.prepend = HfBpeTokenizer::Prepend::Never;
  else unsupported(path, "Metaspace prepend_scheme '" + scheme + "'");
  s.split_at_space = p.boolean("split", true);
}
}  // namespace

HfBpeTokenizer::HfBpeTokenizer(Spec spec) : spec_(std::move(spec)) {
  for (const auto& a : spec_.added) place(spec_.pieces, a.id, spec_.pieces.size() > size_t(a.id) && !spec_.pieces[size_t(a.id)].empty() ? spec_.pieces[size_t(a.id)] : a.content);
  is_special_.assign(spec_.pieces.size(), false);
  for (const auto& a : spec_.added)
    if (a.special) is_special_[size_t(a.id)] = true;
  std::sort(spec_.added.begin(), spec_.added.end(),
            [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  for (const auto& a : spec_.added)
    if (!a.content.empty()) added_by_byte_[uint8_t(a.content[0])].push_back(&a);
  tok::BpeOptions o = spec_.bpe;
  if (spec_.kind == Kind::SentencePiece) {
    // If no vocabulary piece holds "▁" right after a non-"▁" character, no merge can join across the
    // start of a "▁" run, so the text can be cut before each such run and the words encoded (and
    // cached) separately with identical results. Checked on the vocabulary, not assumed.
    spm_split_words_ = true;
    for (const auto& p : spec_.pieces)
      for (size_t i = 1; i + 3 <= p.size(); ++i)
        if (p.compare(i, 3, kSpace) == 0 && !(i >= 3 && p.compare(i - 3, 3, kSpace) == 0)) spm_split_words_ = false;
  }
  o.cache = spec_.kind == Kind::ByteLevel || spm_split_words_ || spec_.split_at_space;
  model_ = std::make_unique<tok::BpeModel>(spec_.pieces, spec_.merges, o);
  spec_.merges.clear();
  spec_.merges.shrink_to_fit();
  if (spec_.kind == Kind::ByteLevel)
    for (const auto& p : spec_.splits) splitters_.push_back(std::make_unique<tok::RegexSplitter>(p));
}

std::string HfBpeTokenizer::describe() const {
  return std::string(spec_.kind == Kind::ByteLevel ? "byte-level BPE" : "SentencePiece BPE") + " (" + spec_.source +
         "), " + std::to_string(model_->size()) + " tokens";
}

void HfBpeTokenizer::encode_spm_segment(std::string_view text, bool first, std::vector<int32_t>* out) const {
  std::string s;
  s.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') s += kSpace;
    else s.push_back(c);
  }
  const bool starts_with_space = s.compare(0, 3, kSpace) == 0;
  switch (spec_.prepend) {
    case Prepend::Legacy: if (first) s.insert(0, kSpace); break;
    case Prepend::First: if (first && !starts_with_space) s.insert(0, kSpace); break;
    case Prepend::Always: if (!starts_with_space) s.insert(0, kSpace); break;
    case Prepend::Never: break;
  }
  auto space_at = [&](size_t i) { return s.compare(i, 3, kSpace) == 0; };
  size_t start = 0;
  if (spec_.split_at_space) {  // Metaspace split: cut before every "▁"
    for (size_t i = 1; i + 3 <= s.size(); ++i)
      if (space_at(i)) {
        model_->encode_word(std::string_view(s).substr(start, i - start), out);
        start = i;
      }
  } else if (spm_split_words_) {  // cut before every "▁" run that follows another character
    for (size_t i = 1; i + 3 <= s.size(); ++i)
      if (space_at(i) && !(i >= 3 && space_at(i - 3))) {
        model_->encode_word(std::string_view(s).substr(start, i - start), out);
        start = i;
      }
  }
  model_->encode_word(std::string_view(s).substr(start), out);
}

void HfBpeTokenizer::encode_segment(std::string_view text, bool first, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string normalized;
  if (spec_.nfc) {
    normalized = tok::nfc(text);
    text = normalized;
  }
  if (spec_.kind == Kind::SentencePiece) {
    encode_spm_segment(text, first, out);
    return;
  }
  std::vector<std::string_view> words = {text}, next;
  for (const auto& sp : splitters_) {
    next.clear();
    for (auto w : words) sp->split(w, &next);
    words.swap(next);
  }
  for (auto w : words) model_->encode_word(bytes_.encode(w), out);
}

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text, bool add_special) const {
  if (size_t bad = tok::utf8_invalid_offset(text); bad != std::string_view::npos)
    fail(ErrorKind::InvalidInput, "text is not valid UTF-8 at byte " + std::to_string(bad));
  std::vector<int32_t> ids;
  if (add_special && spec_.add_bos && spec_.bos >= 0) ids.push_back(spec_.bos);
  size_t seg = 0;
  bool first = true;
  for (size_t i = 0; i < text.size();) {
    const Added* hit = nullptr;
    for (const Added* a : added_by_byte_[uint8_t(text[i])])
      if (text.compare(i, a->content.size(), a->content) == 0) { hit = a; break; }
    if (!hit) { ++i; continue; }
    encode_segment(text.substr(seg, i - seg), first, &ids);
    ids.push_back(hit->id);
    first = false;
    i += hit->content.size();
    seg = i;
  }
  encode_segment(text.substr(seg), first, &ids);
  return ids;
}

std::string HfBpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= model_->size())
      fail(ErrorKind::InvalidInput, "token id " + std::to_string(id) + " outside the vocabulary");
    if (skip_special && size_t(id) < is_special_.size() && is_special_[size_t(id)]) continue;
    const std::string& p = model_->piece(id);
    bool added = std::any_of(spec_.added.begin(), spec_.added.end(), [&](const Added& a) { return a.id == id; });
    if (spec_.kind == Kind::ByteLevel) {
      if (added || !bytes_.decode(p, &out)) out += p;
    } else {
      unsigned v;
      if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && std::sscanf(p.c_str(), "<0x%02X>", &v) == 1) {
        out.push_back(char(v));
      } else {
        for (size_t i = 0; i < p.size();) {
          if (p.compare(i, 3, kSpace) == 0) { out.push_back(' '); i += 3; }
          else out.push_back(p[i++]);
        }
      }
    }
  }
  if (spec_.kind == Kind::SentencePiece && spec_.prepend != Prepend::Never && !out.empty() && out[0] == ' ')
    out.erase(0, 1);  // Strip(1, 0)
  return out;
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_tokenizer_json(const std::string& path,
                                                                    const nlohmann::json& config) {
  const nlohmann::json json = read_json_file(path);
  const JsonIn j(json, path);
  Spec s;
  s.source = "tokenizer.json";
  const JsonIn m = j.at("model");
  std::string type = m.str("type", std::string("BPE"));
  if (type != "BPE") unsupported(path, "model type '" + type + "'");
  const JsonIn vocab = m.at("vocab");
  if (!vocab.is_object()) vocab.bad("must be an object");
  for (auto it = vocab.json().begin(); it != vocab.json().end(); ++it)
    place(s.pieces, token_id_in_range(vocab.at(it.key())), it.key());
  s.merges = parse_merges_json(m.at("merges"));
  s.bpe.byte_fallback = m.boolean("byte_fallback", false);
  s.bpe.ignore_merges = m.boolean("ignore_merges", false);
  s.bpe.fuse_unk = m.boolean("fuse_unk", false);
  if (m.has("unk_token") && m.at("unk_token").is_string()) {
    const std::string unk = m.at("unk_token").str();
    if (vocab.has(unk)) s.bpe.unk_id = token_id_in_range(vocab.at(unk));
  }
  for (const JsonIn& a : j.opt("added_tokens").is_null() ? std::vector<JsonIn>() : j.at("added_tokens").elements())
    s.added.push_back({a.at("content").str(), token_id_in_range(a.at("id")), a.boolean("special", false)});
  // Normalizer: NFC (Qwen) or the SentencePiece Prepend/Replace pair.
  std::vector<JsonIn> norms;
  if (j.has("normalizer")) {
    const JsonIn n = j.at("normalizer");
    if (n.str("type", std::string()) == "Sequence") norms = n.at("normalizers").elements();
    else norms.push_back(n);
  }
  bool spm = false;
  for (const JsonIn& n : norms) {
    std::string t = n.str("type", std::string());
    if (t == "NFC") s.nfc = true;
    else if (t == "Prepend" && n.str("prepend", std::string()) == kSpace) spm = true;
    else if (t == "Replace" && n.at("pattern").str("String", std::string()) == " " && n.str("content", std::string()) == kSpace) spm = true;
    else unsupported(path, "normalizer '" + t + "'");
  }
  const JsonIn pre = j.opt("pre_tokenizer");
  if (!pre.is_null() && pre.str("type", std::string()) == "Metaspace") {
    if (spm) unsupported(path, "a Metaspace pre-tokenizer together with the SentencePiece normalizer");
    read_metaspace(s, pre, path);
  } else if (spm) {
    s.kind = Kind::SentencePiece;
    if (!pre.is_null()) unsupported(path, "a pre-tokenizer together with the SentencePiece normalizer");
  } else {
    s.kind = Kind::ByteLevel;
    read_pretokenizer(s, j.opt("pre_tokenizer"), path);
  }
  // BOS from a TemplateProcessing post-processor (a special token before sequence A).
  if (j.has("post_processor") && j.at("post_processor").is_object() &&
      j.at("post_processor").str("type", std::string()) == "TemplateProcessing") {
    const JsonIn single = j.at("post_processor").at("single");
    if (single.size() > 0 && single.at(0).has("SpecialToken")) {
      std::string name = single.at(0).at("SpecialToken").at("id").str();
      for (const auto& a : s.added)
        if (a.content == name) { s.bos = a.id; s.add_bos = true; }
    }
  }
  bool add_bos = s.add_bos;
  apply_config(s, config, config_name(path));
  if (!config.contains("add_bos_token")) s.add_bos = add_bos || s.add_bos;
  if (spm) s.splits.clear();
  return std::make_unique<HfBpeTokenizer>(std::move(s));
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_vocab_merges(const std::string& vocab_json,
                                                                  const std::string& merges_txt,
                                                                  const nlohmann::json& config) {
  Spec s;
  s.source = "vocab.json + merges.txt";
  s.splits = {tok::kGpt2Pattern};
  nlohmann::json v = read_json_file(vocab_json);
  if (!v.is_object()) fail(ErrorKind::InvalidInput, vocab_json + ": not a JSON object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    place(s.pieces, token_id_in_range(JsonIn(it.value(), vocab_json, it.key())), it.key());
  }
  std::istringstream in(read_text_file(merges_txt));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    size_t sp = line.find(' ', 1);
    if (sp == std::string::npos) fail(ErrorKind::InvalidInput, merges_txt + ": bad merge line '" + line + "'");
    s.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  apply_config(s, config, config_name(vocab_json));
  return std::make_unique<HfBpeTokenizer>(std::move(s));
}

namespace {
std::string base64_decode(const std::string& in, const std::string& what) {
  auto val = [&](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0;
  uint32_t acc = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    if (v < 0) fail(ErrorKind::InvalidInput, what + ": invalid base64 '" + in + "'");
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  return out;
}
}  // namespace

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_tiktoken(const std::string& path, const nlohmann::json& config) {
  Spec s;
  s.source = "tiktoken tokenizer.model";
  s.splits = {tok::kLlama3Pattern};
  s.bpe.rank_by_merged_id = true;
  s.bpe.ignore_merges = true;
  tok::ByteLevelMap bl;
  std::istringstream in(read_text_file(path));
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos) fail(ErrorKind::InvalidInput, path + ": line " + std::to_string(lineno) + " is not 'base64 rank'");
    const std::string r = line.substr(sp + 1);
    if (r.empty() || r.size() > 9 || r.find_first_not_of("0123456789") != std::string::npos || std::stol(r) > kMaxTokenId)
      fail(ErrorKind::InvalidInput, path + ": line " + std::to_string(lineno) + ": rank '" + r + "' is not a token id");
    int32_t rank = int32_t(std::stol(r));
    place(s.pieces, rank, bl.encode(base64_decode(line.substr(0, sp), path)));
  }
  // Llama-3 special tokens follow the regular ones (ids 128000..128255 for the 128000-token vocab).
  const int32_t base = int32_t(s.pieces.size());
  const char* fixed[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                         "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                         "<|image|>"};
  for (int32_t i = 0; i < 256; ++i) {
    std::string name = i < 12 ? fixed[i] : "<|reserved_special_token_" + std::to_string(i - 10) + "|>";
    s.added.push_back({name, base + i, true});
  }
  s.bos = base;
  s.eos = base + 1;
  s.add_bos = true;
  apply_config(s, config, config_name(path));
  return std::make_unique<HfBpeTokenizer>(std::move(s));
}

}  // namespace ar
