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
  }
  return p;
}

LegacyBlockParams legacy(GgmlType t, const float* w) {
  LegacyBlockParams p;
  const int qmin = ggml_legacy_qmin(t), qmax = ggml_legacy_qmax(t);
  if (qmin < 0) {
    p.d = fp16(signed_max(w, 32) / float(qmin));
    return p;
  }
  float lo = 0, hi = 0;
  for (int i = 0; i < 32; ++i) lo = std::min(lo, w[i]), hi = std::max(hi, w[i]);
  p.d = fp16((hi - lo) / float(qmax));
  p.m = fp16(lo);
  return p;
}

// The codes of one group of n elements: q = clamp(round((w + m) / s + V)), as qdq_fixed_fwd.
void group_codes(const float* w, const float* v, int n, float s, float m, int qlo, int qhi, int* q) {
  for (int i = 0; i < n; ++i) {
    const float x = s != 0 ? round_even((w[i] + m) / s + (v ? v[i] : 0.f)) : 0.f;
    q[i] = clampi(x, qlo, qhi);
  }
}

void float_row(GgmlType t, const float* w, int64_t cols, uint8_t* out) {
  for (int64_t i = 0; i < cols; ++i) {
    if (t == GgmlType::F32) {
      std::memcpy(out + i * 4, w + i, 4);
    } else if (t == GgmlType::F16) {
      ggml_store_f16(out + i * 2, w[i]);
    } else {
      const uint16_t h = f32_to_bf16(w[i]);
      std::memcpy(out + i * 2, &h, 2);
    }
  }
}
}  // namespace

FixedQdq GgufLayerParams::qdq() const {
  FixedQdq f;
  f.out = rows;
  f.in = cols;
  if (ggml_is_kquant(type)) {
    const KQuantSpec sp = ggml_kquant_spec(type);
    f.group = sp.group_size, f.qlo = sp.q_min, f.qhi = sp.q_max;
  } else {
    f.group = kGgmlLegacyBlock, f.qlo = ggml_legacy_qmin(type), f.qhi = ggml_legacy_qmax(type);
  }
  return f;
}

GgufLayerParams gguf_params_rtn(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols) {
  if (!ggml_is_kquant(t) && !ggml_is_legacy(t))
    fail(ErrorKind::Unsupported, std::string("gguf: ") + ggml_type_name(t) + " has no scales to tune");
  ggml_row_bytes(t, cols);  // checks the block multiple
  GgufLayerParams p;
  p.type = t, p.rows = rows, p.cols = cols;
  const int64_t be = ggml_block_elems(t), per_row = cols / be;
  if (ggml_is_kquant(t)) p.k.resize(size_t(rows * per_row));
  else p.legacy.resize(size_t(rows * per_row));
  const KQuantSpec sp = ggml_is_kquant(t) ? ggml_kquant_spec(t) : KQuantSpec{};
  ctx.pool().parallel_for(rows * per_row, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* x = W + b * be;  // blocks of a row follow each other, rows too
      if (ggml_is_kquant(t)) p.k[size_t(b)] = sp.has_min ? kquant_asym(sp, x) : kquant_sym(sp, x);
      else p.legacy[size_t(b)] = legacy(t, x);
    }
  }, 16);
  return p;
}

GgufLayerParams gguf_params_from_bytes(GgmlType t, int64_t rows, int64_t cols, const std::vector<uint8_t>& bytes) {
  if (!ggml_is_kquant(t) && !ggml_is_legacy(t))
    fail(ErrorKind::Unsupported, std::string("gguf: ") + ggml_type_name(t) + " has no scales to tune");
  GgufLayerParams p;
  p.type = t, p.rows = rows, p.cols = cols;
  const int64_t n = rows * cols / ggml_block_elems(t), bb = ggml_block_bytes(t);
  AR_CHECK(int64_t(bytes.size()) == n * bb, "gguf: packed rows of the wrong size");
  for (int64_t b = 0; b < n; ++b) {
    if (ggml_is_kquant(t)) p.k.push_back(ggml_kquant_unpack(t, bytes.data() + b * bb));
    else p.legacy.push_back(ggml_legacy_unpack(t, bytes.data() + b * bb));
  }
  return p;
}

void gguf_group_scales(const GgufLayerParams& p, float* s, float* m) {
  if (!p.k.empty()) {
    const KQuantSpec sp = ggml_kquant_spec(p.type);
    for (size_t b = 0; b < p.k.size(); ++b)
      for (int j = 0; j < sp.groups; ++j) {
        const KQuantBlockParams& k = p.k[b];
        s[b * size_t(sp.groups) + size_t(j)] = k.d * float(k.sc[size_t(j)]);
        m[b * size_t(sp.groups) + size_t(j)] = sp.has_min ? k.dmin * float(k.mn[size_t(j)]) : 0.f;
      }
    return;
  }
  for (size_t b = 0; b < p.legacy.size(); ++b) {
    s[b] = p.legacy[b].d;
    m[b] = -p.legacy[b].m;  // ggml's m is the offset added: w = d q + m
  }
}

std::vector<uint8_t> gguf_pack_codes(Context& ctx, GgufLayerParams& p, const float* W, const float* V, float* What) {
  const int64_t bb = ggml_block_bytes(p.type), be = ggml_block_elems(p.type);
  const int64_t nblocks = p.rows * p.cols / be;
  const FixedQdq f = p.qdq();
  std::vector<uint8_t> out(size_t(nblocks * bb));
  ctx.pool().parallel_for(nblocks, [&](int64_t b0, int64_t b1) {
    std::vector<float> s(size_t(be / f.group)), m(s.size());
    for (int64_t b = b0; b < b1; ++b) {
      const float* x = W + b * be;
      const float* v = V ? V + b * be : nullptr;
      if (!p.k.empty()) {
        KQuantBlockParams& k = p.k[size_t(b)];
        const KQuantSpec sp = ggml_kquant_spec(p.type);
        for (int j = 0; j < sp.groups; ++j) {
          const float sj = k.d * float(k.sc[size_t(j)]), mj = sp.has_min ? k.dmin * float(k.mn[size_t(j)]) : 0.f;
          group_codes(x + j * sp.group_size, v ? v + j * sp.group_size : nullptr, sp.group_size, sj, mj, f.qlo, f.qhi,
                      k.q.data() + j * sp.group_size);
        }
        ggml_kquant_pack(p.type, k, out.data() + b * bb);
      } else {
        LegacyBlockParams& l = p.legacy[size_t(b)];
        group_codes(x, v, 32, l.d, -l.m, f.qlo, f.qhi, l.q.data());
        ggml_legacy_pack(p.type, l, out.data() + b * bb);
      }
      if (What) ggml_dequantize(p.type, out.data() + b * bb, What + b * be, be);
    }
  }, 16);
  return out;
}

std::vector<uint8_t> gguf_quantize_rtn(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols,
                                       float* What) {
  const int64_t rb = ggml_row_bytes(t, cols);  // checks the block multiple
  if (ggml_is_kquant(t) || ggml_is_legacy(t)) {
    GgufLayerParams p = gguf_params_rtn(ctx, t, W, rows, cols);
    return gguf_pack_codes(ctx, p, W, nullptr, What);
  }
  std::vector<uint8_t> out(size_t(rows * rb));
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float_row(t, W + r * cols, cols, out.data() + r * rb);
      if (What) ggml_dequantize(t, out.data() + r * rb, What + r * cols, cols);
    }
  }, 8);
  return out;
}

}  // namespace ar::quant
