// Per-layer attention kinds (transformers' `layer_types`): which layers attend through a sliding window
// of `sliding_window` keys (ModelConfig::sliding_layers), computed exactly by the attention kernels.
#include <string>

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
  const std::vector<JsonIn> types = in.at("layer_types").elements();
  if (int64_t(types.size()) != cfg.num_layers)
    in.at("layer_types").bad(std::to_string(types.size()) + " entries for num_hidden_layers " +
                             std::to_string(cfg.num_layers));
  for (size_t l = 0; l < types.size(); ++l) {
    const std::string t = types[l].str();
    if (t != "sliding_attention" && t != "full_attention")
      types[l].bad("layer type '" + t + "' is not supported (sliding_attention, full_attention)");
    cfg.sliding_layers[l] = t == "sliding_attention" ? 1 : 0;
  }
}

}  // namespace ar
