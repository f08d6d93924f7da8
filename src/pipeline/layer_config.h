// --layer_config: a scheme per layer, as AutoRound's CLI takes it (auto_round/utils/common.py
// parse_layer_config_arg, to_standard_regex; compressors/layer_config_resolver.py).
//
// The text is a dict from a layer name or pattern to a preset name ("W8A16", "BF16") or to a dict of
// bits, group_size, sym, data_type and scheme (act_bits / act_data_type only as 16-bit activations):
//   --layer_config '{"mlp.down_proj": {"bits": 8}, "model.layers.0.self_attn.q_proj": "BF16"}'
//   --layer_config "{mlp.down_proj:{bits:8},experts.[0-3].down_proj:{group_size:32}}"
// Strict JSON is read first (with "\d"-style escapes repaired), then AutoRound's shell-friendly form
// (no quotes needed; a value "8" is the number 8, "true" the boolean).
//
// A key that is the full name of a quantizable Linear (model.layers.3.mlp.down_proj) is that Linear;
// any other key is a pattern (standard_regex) searched in every Linear's full name. An entry's missing
// keys are the run's (--bits, --group_size, --sym; a preset's are the preset's). bits 16 keeps the
// Linear in 16 bit, as --fp_layers does. Which entry decides a Linear, as AutoRound resolves them:
// the last pattern that matches it, else --fp_layers, else its exact-name entry, else the run's scheme.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "quant/signround.h"

namespace ar {

// One entry: its key and the keys it sets (bits 16: kept in 16 bit).
struct LayerConfigEntry {
  std::string key;
  bool pattern = false;  // not a full Linear name (decided against the model: LayerConfig::bind)
  std::string regex;     // standard_regex(key)
  std::optional<int> bits;
  std::optional<int64_t> group_size;
  std::optional<bool> sym;
  bool keeps_fp() const { return bits && *bits >= 16; }
  // The format it gives a Linear, on top of the run's `base` (the entry's keys win).
  quant::QuantFormat format(const quant::QuantFormat& base) const;
  std::string describe() const;  // "bits 8, group_size 32" / "16 bit"
};

class LayerConfig {
 public:
  // InvalidInput naming the entry: unparsable text, an unknown key or preset, a value out of range, a
  // float or GGUF data type (per-layer float schemes are not supported), a pattern that is no regex.
  static LayerConfig parse(const std::string& text);
  bool empty() const { return entries_.empty(); }
  const std::vector<LayerConfigEntry>& entries() const { return entries_; }
  // Rewrites each key through `rename` (a name in a multimodal checkpoint's spelling to its text-model
  // name: model/name_map.h); a changed key's pattern is derived anew.
  void rename_keys(const std::function<std::string(const std::string&)>& rename);
  // Marks every key that is not in `linear_names` (the model's quantizable Linears, full names) a pattern.
  void bind(const std::vector<std::string>& linear_names);
  // The entry deciding `full_name` ahead of --fp_layers (the last matching pattern), and the one after
  // it (its exact-name entry); null where none.
  const LayerConfigEntry* pattern_match(const std::string& full_name) const;
  const LayerConfigEntry* exact_match(const std::string& full_name) const;
  // Whether entry i names or matches the Linear `full_name` (whatever the precedence).
  bool matches(size_t i, const std::string& full_name) const;
  // Whether any entry quantizes (bits < 16) rather than keeps layers.
  bool quantizes() const;
  // Canonical JSON of the entries, for the resume fingerprint and the report.
  std::string canonical() const;

 private:
  std::vector<LayerConfigEntry> entries_;
  std::vector<std::regex> compiled_;  // entries_' regexes, in order
};

// AutoRound's to_standard_regex: a key without regex tokens (".*", "^", "$", "|", "()", "[]", "?",
// "+") matches as a substring (dots literal); with them, bare dots become literal dots and the pattern
// is searched unanchored unless it says otherwise ("mlp.gate$" -> ".*mlp\.gate$").
std::string standard_regex(const std::string& key);

}  // namespace ar
