// Per-layer attention kinds (transformers' `layer_types`): which layers attend through a sliding window
// of `sliding_window` keys (ModelConfig::sliding_layers), computed exactly by the attention kernels.
#include <string>
#include <vector>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

void configure_sliding_layers(ModelConfig& cfg, const nlohmann::json& j, const std::string& path,
                              int64_t default_window, bool (*default_sliding)(int64_t layer)) {
  const JsonIn in(j, path);
  // sliding_window null: transformers gives the sliding layers no window (every earlier key).
  cfg.sliding_window = null_field(j, "sliding_window") ? 0 : positive_or(in, "sliding_window", default_window);
  cfg.sliding_layers.assign(size_t(cfg.num_layers), 0);
  if (!in.has("layer_types")) {
    for (int64_t l = 0; l < cfg.num_layers; ++l) cfg.sliding_layers[size_t(l)] = default_sliding && default_sliding(l) ? 1 : 0;
    return;
  }
  cfg.sliding_layers = layer_type_flags(in, cfg.num_layers, "sliding_attention", "full_attention");
}

std::vector<uint8_t> layer_type_flags(const JsonIn& in, int64_t layers, const char* flagged, const char* other) {
  const std::vector<JsonIn> types = in.at("layer_types").elements();
  if (int64_t(types.size()) != layers)
    in.at("layer_types").bad(std::to_string(types.size()) + " entries for num_hidden_layers " + std::to_string(layers));
  std::vector<uint8_t> flags(types.size());
  for (size_t l = 0; l < types.size(); ++l) {
    const std::string t = types[l].str();
    if (t != flagged && t != other)
      types[l].bad("layer type '" + t + "' is not supported (" + flagged + ", " + other + ")");
    flags[l] = t == flagged ? 1 : 0;
  }
  return flags;
}

namespace {
// llama.cpp's set_swa_pattern: with period n, layer l slides when l % n < n - 1 (n = 0: every layer).
bool default_sliding_in(int64_t layer, int64_t period) { return period == 0 || layer % period < period - 1; }
}  // namespace

void write_sliding_pattern(const ModelConfig& cfg, std::vector<GgufKey>& keys, int64_t default_period) {
  std::vector<bool> sliding;
  bool as_default = true;
  for (size_t l = 0; l < cfg.sliding_layers.size(); ++l) {
    sliding.push_back(cfg.sliding_layers[l] != 0);
    as_default = as_default && sliding.back() == default_sliding_in(int64_t(l), default_period);
  }
  if (!as_default) set_gguf_key(keys, "attention.sliding_window_pattern", sliding);
}

nlohmann::json read_layer_types(const GgufKeyReader& k, int64_t layers, int64_t default_period) {
  std::vector<bool> sliding(static_cast<size_t>(layers));
  if (auto flags = k.flags("attention.sliding_window_pattern")) {
    if (int64_t(flags->size()) != layers)
      k.bad("attention.sliding_window_pattern",
            "has " + std::to_string(flags->size()) + " flags for " + std::to_string(layers) + " layers");
    sliding = *flags;
  } else {
    const int64_t period = k.has("attention.sliding_window_pattern")
                               ? k.natural("attention.sliding_window_pattern").value_or(default_period)
                               : default_period;
    for (int64_t l = 0; l < layers; ++l) sliding[size_t(l)] = default_sliding_in(l, period);
  }
  nlohmann::json types = nlohmann::json::array();
  for (bool s : sliding) types.push_back(s ? "sliding_attention" : "full_attention");
  return types;
}

}  // namespace ar
