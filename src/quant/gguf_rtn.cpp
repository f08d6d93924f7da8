#include "quant/gguf_rtn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/ggml_kquants.h"
#include "quant/ggml_legacy.h"

namespace ar::quant {

namespace {
float fp16(float v) { return f16_to_f32(f32_to_f16(v)); }
int clampi(float v, int lo, int hi) { return int(std::min<float>(float(hi), std::max<float>(float(lo), v))); }
float round_even(float v) { return std::nearbyint(v); }

// The value of largest magnitude in x[0, n), with its sign (the first one on ties).
float signed_max(const float* x, int64_t n) {
  float best = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  return best;
}

KQuantBlockParams kquant_asym(const KQuantSpec& sp, const float* w) {
  KQuantBlockParams p;
  float s[16] = {}, m[16] = {}, smax = 0, mmax = 0;
  for (int j = 0; j < sp.groups; ++j) {
    const float* x = w + j * sp.group_size;
    float lo = 0, hi = 0;
    for (int i = 0; i < sp.group_size; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    s[j] = (hi - lo) / float(sp.q_max);
    m[j] = -lo;
    smax = std::max(smax, s[j]);
    mmax = std::max(mmax, m[j]);
  }
  p.d = fp16(smax / float(sp.sc_max));
  p.dmin = fp16(mmax / float(sp.mn_max));
  for (int j = 0; j < sp.groups; ++j) {
    p.sc[size_t(j)] = p.d > 0 ? clampi(round_even(s[j] / p.d), 0, sp.sc_max) : 0;
    p.mn[size_t(j)] = p.dmin > 0 ? clampi(round_even(m[j] / p.dmin), 0, sp.mn_max) : 0;
    const float sj = p.d * float(p.sc[size_t(j)]), mj = p.dmin * float(p.mn[size_t(j)]);
    for (int i = 0; i < sp.group_size; ++i) {
      const float x = w[j * sp.group_size + i];
      p.q[size_t(j * sp.group_size + i)] = sj > 0 ? clampi(round_even((x + mj) / sj), 0, sp.q_max) : 0;
    }
  }
  return p;
}

KQuantBlockParams kquant_sym(const KQuantSpec& sp, const float* w) {
  KQuantBlockParams p;
  float s[16] = {};
  for (int j = 0; j < sp.groups; ++j) s[j] = signed_max(w + j * sp.group_size, sp.group_size) / float(sp.q_min);
  p.d = fp16(signed_max(s, sp.groups) / float(sp.sc_min));
  for (int j = 0; j < sp.groups; ++j) {
    p.sc[size_t(j)] = p.d != 0 ? clampi(round_even(s[j] / p.d), sp.sc_min, sp.sc_max) : 0;
    const float sj = p.d * float(p.sc[size_t(j)]);
    for (int i = 0; i < sp.group_size; ++i) {
      const float x = w[j * sp.group_size + i];
      p.q[size_t(j * sp.group_size + i)] = sj != 0 ? clampi(round_even(x / sj), sp.q_min, sp.q_max) : 0;
    }
  }
  return p;
}

LegacyBlockParams legacy(GgmlType t, const float* w) {
  LegacyBlockParams p;
  const int qmin = ggml_legacy_qmin(t), qmax = ggml_legacy_qmax(t);
  if (qmin < 0) {
    p.d = fp16(signed_max(w, 32) / float(qmin));
    for (int i = 0; i < 32; ++i) p.q[size_t(i)] = p.d != 0 ? clampi(round_even(w[i] / p.d), qmin, qmax) : 0;
    return p;
  }
  float lo = 0, hi = 0;
  for (int i = 0; i < 32; ++i) lo = std::min(lo, w[i]), hi = std::max(hi, w[i]);
  p.d = fp16((hi - lo) / float(qmax));
  p.m = fp16(lo);
  for (int i = 0; i < 32; ++i) p.q[size_t(i)] = p.d > 0 ? clampi(round_even((w[i] - p.m) / p.d), 0, qmax) : 0;
  return p;
}

void quantize_row(GgmlType t, const float* w, int64_t cols, uint8_t* out) {
  const int64_t bb = ggml_block_bytes(t), be = ggml_block_elems(t);
  for (int64_t b = 0; b < cols / be; ++b) {
    const float* x = w + b * be;
    uint8_t* o = out + b * bb;
    switch (t) {
      case GgmlType::F32: std::memcpy(o, x, 4); break;
      case GgmlType::F16: ggml_store_f16(o, x[0]); break;
      case GgmlType::BF16: {
        const uint16_t h = f32_to_bf16(x[0]);
        std::memcpy(o, &h, 2);
        break;
      }
      default:
        if (ggml_is_legacy(t)) {
          ggml_legacy_pack(t, legacy(t, x), o);
        } else {
          const KQuantSpec sp = ggml_kquant_spec(t);
          ggml_kquant_pack(t, sp.has_min ? kquant_asym(sp, x) : kquant_sym(sp, x), o);
        }
    }
  }
}
}  // namespace

std::vector<uint8_t> gguf_quantize_rtn(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols,
                                       float* What) {
  const int64_t rb = ggml_row_bytes(t, cols);  // checks the block multiple
  std::vector<uint8_t> out(size_t(rows * rb));
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      quantize_row(t, W + r * cols, cols, out.data() + r * rb);
      if (What) ggml_dequantize(t, out.data() + r * rb, What + r * cols, cols);
    }
  }, 8);
  return out;
}

}  // namespace ar::quant
