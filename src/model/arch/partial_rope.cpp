// Partial RoPE (GLM-4.5, Qwen3-Next): each head's first partial_rotary_factor of its dims rotated, rotate_half
// pairs. transformers 5 keeps the factor in rope_parameters, older configs at the top level.
#include <string>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

void configure_partial_rope(ModelConfig& cfg, const nlohmann::json& j, const std::string& path, double default_factor) {
  const JsonIn in(j, path);
  const bool top = in.has("partial_rotary_factor");
  const bool nested = !top && in.has("rope_parameters") && in.at("rope_parameters").is_object() &&
                      in.at("rope_parameters").has("partial_rotary_factor");
  const double f = top      ? in.at("partial_rotary_factor").num()
                   : nested ? in.at("rope_parameters").at("partial_rotary_factor").num()
                            : default_factor;
  const double dims = double(cfg.head_dim) * f;
  if (!(f > 0 && f <= 1) || dims != double(int64_t(dims)) || int64_t(dims) % 2)
    fail(ErrorKind::InvalidInput, path + ": field 'partial_rotary_factor': " + std::to_string(f) +
                                      " must be in (0, 1] and give an even whole number of head_dim " +
                                      std::to_string(cfg.head_dim));
  cfg.rotary_dims = int64_t(dims);
}

}  // namespace ar
