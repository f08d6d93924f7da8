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

// Applies tokenizer_config.json: BOS/EOS names, add_bos_token, added_tokens_decoder.
void apply_config(HfBpeTokenizer::Spec& s, const nlohmann::json& cfg) {
  if (!cfg.is_object()) return;
  if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object())
    for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it) {
      int32_t id = int32_t(std::stol(it.key()));
      std::string content = it.value().value("content", std::string());
      bool special = it.value().value("special", false);
      if (content.empty()) continue;
      bool known = std::any_of(s.added.begin(), s.added.end(), [&](const auto& a) { return a.id == id; });
      if (!known) s.added.push_back({content, id, special});
    }
  auto token_id = [&](const char* key) -> int32_t {
    if (!cfg.contains(key) || cfg[key].is_null()) return -1;
    std::string name = cfg[key].is_string() ? cfg[key].get<std::string>() : cfg[key].value("content", std::string());
    for (const auto& a : s.added)
      if (a.content == name) return a.id;
    for (size_t i = 0; i < s.pieces.size(); ++i)
      if (s.pieces[i] == name) return int32_t(i);
    return -1;
  };
  if (int32_t b = token_id("bos_token"); b >= 0) s.bos = b;
  if (int32_t e = token_id("eos_token"); e >= 0) s.eos = e;
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) s.add_bos = cfg["add_bos_token"].get<bool>();
  if (cfg.value("tokenizer_class", std::string()).rfind("Qwen2Tokenizer", 0) == 0) {
    s.nfc = true;
    s.splits = {tok::kQwen2Pattern};
  }
}

void place(std::vector<std::string>& pieces, int32_t id, const std::string& p) {
  if (id < 0) return;
  if (size_t(id) >= pieces.size()) pieces.resize(size_t(id) + 1);
  pieces[size_t(id)] = p;
}

std::vector<std::pair<std::string, std::string>> parse_merges_json(const nlohmann::json& m, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(m.size());
  for (const auto& e : m) {
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail(ErrorKind::InvalidInput, path + ": bad merge '" + s + "'");
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2) {
      out.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      fail(ErrorKind::InvalidInput, path + ": merges entry is neither \"a b\" nor [a, b]");
    }
  }
  return out;
}

// Walks a pre_tokenizer description and records what we support; anything else is refused by name.
void read_pretokenizer(HfBpeTokenizer::Spec& s, const nlohmann::json& p, const std::string& path) {
  if (p.is_null()) return;
  std::string type = p.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& q : p["pretokenizers"]) read_pretokenizer(s, q, path);
  } else if (type == "ByteLevel") {
    if (p.value("add_prefix_space", false)) unsupported(path, "ByteLevel add_prefix_space=true");
    if (p.value("use_regex", true)) s.splits.push_back(tok::kGpt2Pattern);
  } else if (type == "Split") {
    const auto& pat = p["pattern"];
    if (!pat.contains("Regex")) unsupported(path, "Split with a string pattern");
    std::string behavior = p.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") unsupported(path, "Split behavior '" + behavior + "'");
    if (p.value("invert", false)) unsupported(path, "Split invert=true");
    s.splits.push_back(pat["Regex"].get<std::string>());
  } else if (type == "Digits") {
    if (!p.value("individual_digits", false)) unsupported(path, "Digits individual_digits=false");
    s.splits.push_back("\\p{N}");
  } else {
    unsupported(path, "pre-tokenizer '" + type + "'");
  }
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
  o.cache = spec_.kind == Kind::ByteLevel || spm_split_words_;
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

void HfBpeTokenizer::encode_segment(std::string_view text, bool first, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  if (spec_.kind == Kind::SentencePiece) {
    std::string s;
    s.reserve(text.size() + 8);
    if (first) s += kSpace;  // Prepend("▁") applies to the start of the input
    for (char c : text) {
      if (c == ' ') s += kSpace;
      else s.push_back(c);
    }
    if (!spm_split_words_) {
      model_->encode_word(s, out);
      return;
    }
    size_t start = 0;  // cut before every "▁" run that follows another character
    for (size_t i = 1; i + 3 <= s.size(); ++i)
      if (s.compare(i, 3, kSpace) == 0 && !(i >= 3 && s.compare(i - 3, 3, kSpace) == 0)) {
        model_->encode_word(std::string_view(s).substr(start, i - start), out);
        start = i;
      }
    model_->encode_word(std::string_view(s).substr(start), out);
    return;
  }
  std::string normalized;
  if (spec_.nfc) {
    normalized = tok::nfc(text);
    text = normalized;
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
  if (spec_.kind == Kind::SentencePiece && !out.empty() && out[0] == ' ') out.erase(0, 1);  // Strip(1, 0)
  return out;
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_tokenizer_json(const std::string& path,
                                                                    const nlohmann::json& config) {
  nlohmann::json j = read_json_file(path);
  try {
    Spec s;
    s.source = "tokenizer.json";
    const auto& m = j.at("model");
    std::string type = m.value("type", std::string("BPE"));
    if (type != "BPE") unsupported(path, "model type '" + type + "'");
    for (auto it = m.at("vocab").begin(); it != m.at("vocab").end(); ++it) place(s.pieces, it.value().get<int32_t>(), it.key());
    s.merges = parse_merges_json(m.at("merges"), path);
    s.bpe.byte_fallback = m.value("byte_fallback", false);
    s.bpe.ignore_merges = m.value("ignore_merges", false);
    s.bpe.fuse_unk = m.value("fuse_unk", false);
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      auto it = m["vocab"].find(m["unk_token"].get<std::string>());
      if (it != m["vocab"].end()) s.bpe.unk_id = it->get<int32_t>();
    }
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"]) s.added.push_back({a.at("content"), a.at("id"), a.value("special", false)});
    // Normalizer: NFC (Qwen) or the SentencePiece Prepend/Replace pair.
    std::vector<nlohmann::json> norms;
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const auto& n = j["normalizer"];
      if (n.value("type", std::string()) == "Sequence") for (const auto& x : n["normalizers"]) norms.push_back(x);
      else norms.push_back(n);
    }
    bool spm = false;
    for (const auto& n : norms) {
      std::string t = n.value("type", std::string());
      if (t == "NFC") s.nfc = true;
      else if (t == "Prepend" && n.value("prepend", std::string()) == kSpace) spm = true;
      else if (t == "Replace" && n["pattern"].value("String", std::string()) == " " && n.value("content", std::string()) == kSpace) spm = true;
      else unsupported(path, "normalizer '" + t + "'");
    }
    if (spm) {
      s.kind = Kind::SentencePiece;
      if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
        unsupported(path, "a pre-tokenizer together with the SentencePiece normalizer");
    } else {
      s.kind = Kind::ByteLevel;
      read_pretokenizer(s, j.value("pre_tokenizer", nlohmann::json()), path);
    }
    // BOS from a TemplateProcessing post-processor (a special token before sequence A).
    if (j.contains("post_processor") && j["post_processor"].is_object() &&
        j["post_processor"].value("type", std::string()) == "TemplateProcessing") {
      const auto& single = j["post_processor"]["single"];
      if (!single.empty() && single[0].contains("SpecialToken")) {
        std::string name = single[0]["SpecialToken"]["id"].get<std::string>();
        for (const auto& a : s.added)
          if (a.content == name) { s.bos = a.id; s.add_bos = true; }
      }
    }
    bool add_bos = s.add_bos;
    apply_config(s, config);
    if (!config.contains("add_bos_token")) s.add_bos = add_bos || s.add_bos;
    if (spm) s.splits.clear();
    return std::make_unique<HfBpeTokenizer>(std::move(s));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::InvalidInput, path + ": " + e.what());
  }
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
    if (!it.value().is_number_integer()) fail(ErrorKind::InvalidInput, vocab_json + ": id of '" + it.key() + "' is not an integer");
    place(s.pieces, it.value().get<int32_t>(), it.key());
  }
  std::istringstream in(read_text_file(merges_txt));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    size_t sp = line.find(' ', 1);
    if (sp == std::string::npos) fail(ErrorKind::InvalidInput, merges_txt + ": bad merge line '" + line + "'");
    s.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  apply_config(s, config);
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
    int32_t rank = int32_t(std::stol(line.substr(sp + 1)));
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
  apply_config(s, config);
  return std::make_unique<HfBpeTokenizer>(std::move(s));
}

}  // namespace ar
