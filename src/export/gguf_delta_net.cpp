#include "export/gguf_delta_net.h"

#include <cmath>

namespace ar {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// `heads` units of `unit` rows each, from the checkpoint's grouped order (head k R + r) into the tiled
// order (file head r Hk + k), after `skip` rows that stay.
std::vector<int64_t> tiled(const DeltaDims& d, int64_t unit, int64_t skip = 0) {
  const int64_t R = d.Hv / d.Hk;
  std::vector<int64_t> order;
  order.reserve(size_t(skip + d.Hv * unit));
  for (int64_t i = 0; i < skip; ++i) order.push_back(i);
  for (int64_t t = 0; t < d.Hv; ++t) {
    const int64_t head = (t % d.Hk) * R + t / d.Hk;
    for (int64_t i = 0; i < unit; ++i) order.push_back(skip + head * unit + i);
  }
  return order;
}
}  // namespace

std::vector<GgufRowPart> gguf_delta_parts(const std::string& hf_name, const std::string& qkv_name,
                                          const ModelConfig& cfg) {
  if (!ends_with(hf_name, ".linear_attn.in_proj_qkvz.weight")) return {};
  const DeltaDims& d = cfg.delta;
  const int64_t vz = d.Hv / d.Hk * d.Dv, per_head = 2 * d.Dk + 2 * vz;
  GgufRowPart qkv{qkv_name, {}}, gate{qkv_name.substr(0, qkv_name.rfind("attn_qkv")) + "attn_gate.weight", {}};
  auto take = [&](GgufRowPart& p, int64_t offset, int64_t n) {
    for (int64_t k = 0; k < d.Hk; ++k)
      for (int64_t i = 0; i < n; ++i) p.rows.push_back(k * per_head + offset + i);
  };
  take(qkv, 0, d.Dk);              // every head's q
  take(qkv, d.Dk, d.Dk);           // k
  take(qkv, 2 * d.Dk, vz);         // v
  take(gate, 2 * d.Dk + vz, vz);   // z
  return {qkv, gate};
}

std::vector<int64_t> gguf_delta_row_order(const std::string& hf_name, const ModelConfig& cfg) {
  const DeltaDims& d = cfg.delta;
  if (hf_name.find(".linear_attn.") == std::string::npos || d.Hk == d.Hv) return {};
  if (ends_with(hf_name, ".in_proj_qkv.weight") || ends_with(hf_name, ".conv1d.weight"))
    return tiled(d, d.Dv, 2 * d.key_dim());
  if (ends_with(hf_name, ".in_proj_z.weight")) return tiled(d, d.Dv);
  for (const char* t : {".in_proj_b.weight", ".in_proj_a.weight", ".A_log", ".dt_bias"})
    if (ends_with(hf_name, t)) return tiled(d, 1);
  return {};
}

std::vector<int64_t> gguf_delta_col_order(const std::string& hf_name, const ModelConfig& cfg) {
  const DeltaDims& d = cfg.delta;
  if (!ends_with(hf_name, ".linear_attn.out_proj.weight") || d.Hk == d.Hv) return {};
  return tiled(d, d.Dv);
}

void gguf_delta_values(const std::string& hf_name, float* v, int64_t n) {
  if (!ends_with(hf_name, ".linear_attn.A_log")) return;
  for (int64_t i = 0; i < n; ++i) v[i] = -std::exp(v[i]);
}

void gguf_delta_values_back(const std::string& hf_name, float* v, int64_t n) {
  if (!ends_with(hf_name, ".linear_attn.A_log")) return;
  for (int64_t i = 0; i < n; ++i) v[i] = std::log(-v[i]);
}

}  // namespace ar
