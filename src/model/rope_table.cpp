#include "model/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ar {

namespace {
// transformers' _compute_yarn_parameters: each frequency between the interpolated (inv / factor) and the
// original one, by a linear ramp over the dims between the correction range's bounds.
void yarn_blend(std::vector<double>& inv, int64_t dim, double theta, const RopeScaling& s) {
  const double omp = double(s.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(omp / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0), extrapolate = 1 - ramp;
    inv[i] = inv[i] / s.factor * (1 - extrapolate) + inv[i] * extrapolate;
  }
}
}  // namespace

double rope_attention_factor(const RopeScaling& s) {
  if (s.type != "yarn") return 1;
  if (s.attention_factor > 0) return s.attention_factor;
  auto mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1; };
  if (s.mscale != 0 && s.mscale_all_dim != 0) return mscale(s.mscale) / mscale(s.mscale_all_dim);
  return mscale(1);
}

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s) {
  std::vector<double> inv(size_t(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  if (s.type == "yarn") yarn_blend(inv, head_dim, theta, s);
  if (s.type == "linear")
    for (auto& f : inv) f /= s.factor;
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

namespace {
RopeTable table(int64_t dims, double theta, const RopeScaling& scaling, int64_t max_pos) {
  RopeTable t;
  t.max_pos = max_pos;
  t.half = dims / 2;
  auto inv = rope_inv_freq(dims, theta, scaling);
  const double af = rope_attention_factor(scaling);
  t.cos.resize(size_t(max_pos * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < t.half; ++i) {
      double a = double(p) * inv[size_t(i)];
      t.cos[size_t(p * t.half + i)] = float(std::cos(a) * af);
      t.sin[size_t(p * t.half + i)] = float(std::sin(a) * af);
    }
  return t;
}
}  // namespace

RopeTable make_rope_table(const ModelConfig& cfg, int64_t max_pos) {
  return table(cfg.rope_dims(), cfg.rope_theta, cfg.rope_scaling, max_pos);
}

RopeTables make_rope_tables(const ModelConfig& cfg, int64_t max_pos) {
  RopeTables t;
  t.full = make_rope_table(cfg, max_pos);
  if (cfg.sliding_rope) {
    t.sliding = table(cfg.rope_dims(), cfg.sliding_rope->theta, cfg.sliding_rope->scaling, max_pos);
    t.sliding_layers = cfg.sliding_layers;
  }
  return t;
}

const RopeTable& RopeTables::layer(int64_t l) const {
  const bool slides = l >= 0 && size_t(l) < sliding_layers.size() && sliding_layers[size_t(l)];
  return slides ? sliding : full;
}

}  // namespace ar
