#include "model/rope_table.h"

#include <cmath>
#include <numbers>

namespace ar {

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s) {
  std::vector<double> inv(size_t(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  if (s.type != "llama3") return inv;
  const double old_ctx = double(s.original_max_position_embeddings);
  const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
  for (auto& f : inv) {
    double wl = 2 * std::numbers::pi / f;
    if (wl > low_wl) {
      f = f / s.factor;  // low frequency: fully scaled
    } else if (wl >= high_wl) {  // medium: interpolate
      double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

RopeTable make_rope_table(const ModelConfig& cfg, int64_t max_pos) {
  RopeTable t;
  t.max_pos = max_pos;
  t.half = cfg.head_dim / 2;
  auto inv = rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling);
  t.cos.resize(size_t(max_pos * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < t.half; ++i) {
      double a = double(p) * inv[size_t(i)];
      t.cos[size_t(p * t.half + i)] = float(std::cos(a));
      t.sin[size_t(p * t.half + i)] = float(std::sin(a));
    }
  return t;
}

}  // namespace ar
