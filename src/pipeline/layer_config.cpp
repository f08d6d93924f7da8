#include "pipeline/layer_config.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/name_pattern.h"
#include "core/printable.h"

namespace ar {

namespace {
using json = nlohmann::ordered_json;

constexpr size_t kMaxText = 1 << 20, kMaxKey = 256, kMaxEntries = 100000;

[[noreturn]] void refuse(const std::string& what) { fail(ErrorKind::InvalidInput, "--layer_config: " + what); }

// A value or key of the text as messages show it (bytes that are not printable UTF-8 escaped).
std::string show(const json& v) {
  return printable(v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace));
}
std::string named(const std::string& key) {
  std::string s = "'";  // appended, not "'" + ...: GCC 12 warns (-Wrestrict) on that form
  s += printable(key);
  s += '\'';
  return s;
}

// A key given twice in one dict (depth 0: a layer name or pattern; 1: a layer's key).
std::string duplicate(const std::string& key, int depth) {
  return (depth == 0 ? "layer " : "key ") + named(key) + " appears twice (which one applies would be a guess)";
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// AutoRound's strip_matching_quotes: curly double quotes read as straight ones, one pair of matching
// outer quotes removed.
std::string strip_quotes(const std::string& text) {
  std::string s;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool curly = text.compare(i, 3, "\xE2\x80\x9C") == 0 || text.compare(i, 3, "\xE2\x80\x9D") == 0;
    s += curly ? '"' : text[i];
    if (curly) i += 2;
  }
  s = trim(s);
  if (s.size() >= 2 && s.front() == s.back() && (s.front() == '\'' || s.front() == '"')) return s.substr(1, s.size() - 2);
  return s;
}

// A scalar of the shell-friendly form, as AutoRound's normalize_scalar reads it: integers, floats,
// true/false, null/none, else the (unquoted) string.
json scalar(const std::string& token) {
  const std::string v = strip_quotes(token);
  const std::string digits = v.substr(!v.empty() && v[0] == '-' ? 1 : 0);
  if (!digits.empty() && digits.size() <= 18 && std::all_of(digits.begin(), digits.end(), ::isdigit))
    return std::stoll(v);
  std::string lower = v;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "true") return true;
  if (lower == "false") return false;
  if (lower == "null" || lower == "none") return nullptr;
  return v;
}

// JSON strings are normalized the same way ("8" is 8), as AutoRound's normalize_tree does.
json normalize(const json& j) {
  if (j.is_object()) {
    json o = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) o[it.key()] = normalize(it.value());
    return o;
  }
  return j.is_string() ? scalar(j.get<std::string>()) : j;
}

// "\d" and other escapes JSON does not know, inside strings, read as a literal backslash.
std::string repair_backslashes(const std::string& s) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string && c == '\\') {
      const char next = i + 1 < s.size() ? s[i + 1] : '\0';
      if (std::string("\"\\/bfnrtu").find(next) == std::string::npos || next == '\0') {
        out += "\\\\";
        continue;
      }
      out += c;
      out += next;
      ++i;
      continue;
    }
    if (c == '"') in_string = !in_string;
    out += c;
  }
  return out;
}

// The shell-friendly form: tokens are "{", "}", ":", "," and runs of anything else but whitespace.
class LooseParser {
 public:
  explicit LooseParser(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
      const char c = s[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (std::string("{}:,").find(c) != std::string::npos) {
        toks_.emplace_back(1, c);
        ++i;
      } else {
        size_t e = i;
        while (e < s.size() && !std::isspace(static_cast<unsigned char>(s[e])) && std::string("{}:,").find(s[e]) == std::string::npos) ++e;
        toks_.push_back(s.substr(i, e - i));
        i = e;
      }
    }
  }
  json parse() {
    json d = dict(0);
    if (pos_ != toks_.size()) refuse("unexpected " + named(toks_[pos_]) + " after the closing brace");
    return d;
  }

 private:
  const std::string* peek() const { return pos_ < toks_.size() ? &toks_[pos_] : nullptr; }
  const std::string& take(const char* expected = nullptr) {
    const std::string* t = peek();
    if (!t) refuse("unexpected end of the text" + (expected ? std::string(" (expected '") + expected + "')" : ""));
    if (expected && *t != expected) refuse("expected '" + std::string(expected) + "', got " + named(*t));
    ++pos_;
    return *t;
  }
  json dict(int depth) {
    if (depth > 1) refuse("dicts nest at most two deep (a layer's keys)");
    take("{");
    json d = json::object();
    while (true) {
      const std::string* t = peek();
      if (t && *t == "}") {
        take();
        return d;
      }
      const json key = scalar(take());
      const std::string name = key.is_string() ? key.get<std::string>() : key.dump(-1, ' ', false, json::error_handler_t::replace);
      if (d.contains(name)) refuse(duplicate(name, depth));
      take(":");
      const std::string* v = peek();
      d[name] = v && *v == "{" ? dict(depth + 1) : scalar(take());
      if (peek() && *peek() == ",") take();
    }
  }
  std::vector<std::string> toks_;
  size_t pos_ = 0;
};

// JSON text, with every object's keys unique; discarded when it is not JSON. A repeated key would
// otherwise take its last value silently, where AutoRound's reader may take another.
json parse_json(const std::string& text) {
  std::vector<std::set<std::string>> open;  // keys seen so far in each enclosing object
  std::string repeated;
  int repeated_depth = 0;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) open.emplace_back();
    if (ev == json::parse_event_t::object_end && !open.empty()) open.pop_back();
    if (ev == json::parse_event_t::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
        repeated.empty())
      repeated = parsed.get<std::string>(), repeated_depth = depth - 1;
    return true;
  };
  json j = json::parse(text, cb, /*allow_exceptions=*/false);
  if (!j.is_discarded() && !repeated.empty()) refuse(duplicate(repeated, repeated_depth));
  return j;
}

json parse_text(const std::string& text) {
  const std::string s = strip_quotes(text);
  for (const std::string& attempt : {s, repair_backslashes(s)}) {
    json j = parse_json(attempt);
    if (!j.is_discarded()) {
      if (!j.is_object()) refuse("the text must be a dict of layer names or patterns to schemes");
      return normalize(j);
    }
  }
  return LooseParser(s).parse();
}

struct Preset {
  const char* name;
  int bits;
};
// AutoRound's presets that are a per-layer int scheme or 16 bit (group 128, symmetric).
constexpr Preset kPresets[] = {{"W2A16", 2}, {"W3A16", 3}, {"W4A16", 4}, {"W8A16", 8}, {"BF16", 16}, {"FP16", 16}};

void apply_preset(LayerConfigEntry& e, const json& v) {
  std::string name = v.is_string() ? v.get<std::string>() : show(v);
  for (char& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const Preset& p : kPresets)
    if (name == p.name) {
      e.bits = p.bits;
      if (p.bits < 16) e.group_size = 128, e.sym = true;
      return;
    }
  refuse(named(e.key) + ": scheme " + named(name) +
         " is not a per-layer scheme here (W2A16, W3A16, W4A16, W8A16, BF16, FP16; per-layer float and GGUF "
         "schemes are not supported)");
}

int64_t integer(const LayerConfigEntry& e, const std::string& k, const json& v) {
  if (!v.is_number_integer()) refuse(named(e.key) + ": " + k + " must be an integer (got " + show(v) + ")");
  // JSON reads 2^63 and above as unsigned: as int64_t they would wrap (2^64-1 to -1, per channel).
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    refuse(named(e.key) + ": " + k + " " + show(v) + " is out of range");
  return v.get<int64_t>();
}

// A data type as a layer's key: "int", or a 16-bit float (the Linear kept).
void apply_data_type(LayerConfigEntry& e, const json& v) {
  const std::string d = v.is_string() ? v.get<std::string>() : show(v);
  if (d == "int") return;
  if (d == "fp" || d == "float" || d == "bf16" || d == "fp16" || d == "float16" || d == "bfloat16") {
    if (!e.bits) e.bits = 16;  // AutoRound infers 16 bits for a 16-bit float type
    if (*e.bits < 16) refuse(named(e.key) + ": data_type " + printable(d) + " with " + std::to_string(*e.bits) +
                             " bits is a float scheme (per-layer float schemes are not supported)");
    return;
  }
  refuse(named(e.key) + ": data_type " + named(d) + " is not supported per layer (int, or fp for 16 bit)");
}

LayerConfigEntry make_entry(const std::string& key, const json& value) {
  LayerConfigEntry e;
  e.key = key;
  if (key.empty()) refuse("an empty layer name");
  if (key.size() > kMaxKey) refuse("a layer name or pattern longer than " + std::to_string(kMaxKey) + " characters");
  if (!value.is_object()) {
    if (value.is_null()) refuse(named(key) + ": no scheme (null)");
    apply_preset(e, value);
    return e;
  }
  if (value.contains("scheme")) apply_preset(e, value["scheme"]);
  for (auto it = value.begin(); it != value.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "scheme" || k == "data_type" || v.is_null()) continue;
    if (k == "bits") {
      const int64_t b = integer(e, k, v);
      if (b != 2 && b != 3 && b != 4 && b != 8 && b != 16)
        refuse(named(key) + ": bits " + std::to_string(b) + " is not supported (2, 3, 4, 8; 16 keeps the layer)");
      e.bits = int(b);
    } else if (k == "group_size") {
      const int64_t g = integer(e, k, v);
      if (g != -1 && (g < 1 || g > (int64_t(1) << 20)))
        refuse(named(key) + ": group_size " + std::to_string(g) + " is not supported (-1 or 1..2^20)");
      e.group_size = g;
    } else if (k == "sym") {
      if (!v.is_boolean() && !(v.is_number_integer() && (v == 0 || v == 1)))
        refuse(named(key) + ": sym must be true or false (got " + show(v) + ")");
      e.sym = v.is_boolean() ? v.get<bool>() : v.get<int64_t>() == 1;
    } else if (k == "act_bits") {
      if (integer(e, k, v) < 16)
        refuse(named(key) + ": act_bits " + show(v) + " (per-layer activation quantization is not supported)");
    } else if (k == "act_data_type") {
      const std::string d = v.is_string() ? v.get<std::string>() : show(v);
      if (d != "fp" && d != "float" && d != "bf16" && d != "fp16")
        refuse(named(key) + ": act_data_type " + named(d) + " (per-layer activation quantization is not supported)");
    } else if (k != "act_group_size" && k != "act_sym" && k != "act_dynamic") {  // 16-bit activations: moot
      refuse(named(key) + ": unknown key " + named(k) + " (bits, group_size, sym, data_type, scheme, act_bits, act_data_type)");
    }
  }
  if (value.contains("data_type") && !value["data_type"].is_null()) apply_data_type(e, value["data_type"]);
  if (!e.bits && !e.group_size && !e.sym) refuse(named(key) + ": the entry sets nothing (bits, group_size or sym)");
  return e;
}

bool has_regex_token(const std::string& key) {
  for (const char* t : {".*", "^", "$", "|", "(", ")", "[", "]", "?", "+"})
    if (key.find(t) != std::string::npos) return true;
  return false;
}
}  // namespace

std::string standard_regex(const std::string& key) {
  std::string r;
  if (!has_regex_token(key)) {
    for (char c : key) {
      if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) r += '\\';
      r += c;
    }
    return ".*" + r + ".*";
  }
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] != '.') {
      r += key[i];
    } else if (i + 1 < key.size() && key[i + 1] == '*') {
      r += ".*";
      ++i;
    } else {
      r += "\\.";
    }
  }
  if (r.rfind("^", 0) != 0 && r.rfind(".*", 0) != 0) r = ".*" + r;
  const bool tail = r.size() >= 2 && r.compare(r.size() - 2, 2, ".*") == 0;
  if (r.back() != '$' && !tail) r += ".*";
  return r;
}

quant::QuantFormat LayerConfigEntry::format(const quant::QuantFormat& base) const {
  quant::QuantFormat f = base;
  if (bits) f.bits = *bits;
  if (group_size) f.group_size = *group_size;
  if (sym) f.sym = *sym;
  // AutoRound pins an 8-bit entry that inherits asymmetry to symmetric: no loader serves W8 asym.
  if (f.bits == 8 && !f.sym && !sym) f.sym = true;
  return f;
}

std::string LayerConfigEntry::describe() const {
  if (keeps_fp()) return "16 bit";
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (bits) add("bits " + std::to_string(*bits));
  if (group_size) add("group_size " + std::to_string(*group_size));
  if (sym) add(*sym ? "sym" : "asym");
  return s;
}

LayerConfig LayerConfig::parse(const std::string& text) {
  if (text.size() > kMaxText) refuse("the text is longer than 1 MiB");
  LayerConfig c;
  if (trim(text).empty()) return c;
  const json j = parse_text(text);
  if (j.size() > kMaxEntries) refuse("more than " + std::to_string(kMaxEntries) + " entries");
  for (auto it = j.begin(); it != j.end(); ++it) {
    LayerConfigEntry e = make_entry(it.key(), it.value());
    e.regex = standard_regex(e.key);
    std::string why;
    std::optional<std::regex> re = compile_name_pattern(e.regex, &why);
    if (!re) refuse(named(e.key) + " is not a pattern this tool reads (" + printable(e.regex) + ": " + why + ")");
    c.compiled_.push_back(std::move(*re));
    e.pattern = true;  // until bind() finds it among the model's Linears
    c.entries_.push_back(std::move(e));
  }
  return c;
}

void LayerConfig::rename_keys(const std::function<std::string(const std::string&)>& rename) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    LayerConfigEntry& e = entries_[i];
    const std::string key = rename(e.key);
    if (key == e.key) continue;
    e.key = key;
    e.regex = standard_regex(key);
    std::string why;
    std::optional<std::regex> re = compile_name_pattern(e.regex, &why);
    if (!re) refuse(named(key) + " is not a pattern this tool reads (" + printable(e.regex) + ": " + why + ")");
    compiled_[i] = std::move(*re);
  }
}

void LayerConfig::bind(const std::vector<std::string>& linear_names) {
  const std::set<std::string> names(linear_names.begin(), linear_names.end());
  for (auto& e : entries_) e.pattern = !names.count(e.key);
}

const LayerConfigEntry* LayerConfig::pattern_match(const std::string& full_name) const {
  for (size_t i = entries_.size(); i-- > 0;)
    if (entries_[i].pattern && std::regex_search(full_name, compiled_[i])) return &entries_[i];
  return nullptr;
}

const LayerConfigEntry* LayerConfig::exact_match(const std::string& full_name) const {
  for (size_t i = entries_.size(); i-- > 0;)
    if (!entries_[i].pattern && entries_[i].key == full_name) return &entries_[i];
  return nullptr;
}

bool LayerConfig::matches(size_t i, const std::string& full_name) const {
  return entries_[i].pattern ? std::regex_search(full_name, compiled_[i]) : entries_[i].key == full_name;
}

bool LayerConfig::quantizes() const {
  return std::any_of(entries_.begin(), entries_.end(), [](const LayerConfigEntry& e) { return !e.keeps_fp(); });
}

std::string LayerConfig::canonical() const {
  json j = json::object();
  for (const auto& e : entries_) {
    json v = json::object();
    if (e.bits) v["bits"] = *e.bits;
    if (e.group_size) v["group_size"] = *e.group_size;
    if (e.sym) v["sym"] = *e.sym;
    j[e.key] = v;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ar
