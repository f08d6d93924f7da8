#include "quant/gguf_search.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "quant/ggml_kquants.h"
#include "quant/ggml_legacy.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_search_steps.h"

namespace ar::quant {

namespace {
namespace st = gguf_steps;

float fp16(float v) { return f16_to_f32(f32_to_f16(v)); }
float rnd(float v) { return std::nearbyint(v); }
int clampi(float v, int lo, int hi) { return int(std::min<float>(float(hi), std::max<float>(float(lo), v))); }
int bits_of(int levels) {
  int b = 0;
  while ((1 << b) < levels) ++b;
  return b;
}

KQuantBlockParams kquant_asym(const KQuantSpec& sp, const float* x, const float* imat) {
  const int g = sp.group_size, bits = bits_of(sp.q_max + 1), nsup = sp.sc_max;  // sc_max == mn_max
  float s[16] = {}, m[16] = {}, sw[16] = {}, wt[32];
  for (int j = 0; j < sp.groups; ++j) {
    const float* xj = x + j * g;
    st::AsymFit fit;
    if (imat) {
      st::imatrix_fix_zeros(imat + j * g, xj, g, bits, wt);
      fit = st::wls_asym_search(xj, wt, g, sp.q_max, -0.9f, 0.05f, 36, false);
    } else {
      double sx2 = 0;
      for (int i = 0; i < g; ++i) sx2 += double(xj[i]) * xj[i];
      const float av = bits == 2 ? 0.0f : float(std::sqrt(sx2 / 32.0));
      for (int i = 0; i < g; ++i) wt[i] = std::fabs(xj[i]) + av;
      fit = bits == 2   ? st::wls_asym_search(xj, wt, g, sp.q_max, -0.5f, 0.1f, 15, true)
            : bits == 4 ? st::wls_asym_search(xj, wt, g, sp.q_max, -1.0f, 0.1f, 20, false)
                        : st::wls_asym_search(xj, wt, g, sp.q_max, -0.5f, 0.1f, 15, false);
    }
    s[j] = std::fabs(fit.scale) < 1e-30f ? 0.0f : fit.scale;
    m[j] = std::fabs(fit.min) < 1e-30f ? 0.0f : fit.min;
    for (int i = 0; i < g; ++i) sw[j] += wt[i];
  }
  KQuantBlockParams p;
  int sc[16], mn[16];
  float d, dmin;
  if (imat) {
    d = st::qp_quants(s, sw, sp.groups, nsup, sc);
    dmin = st::qp_quants(m, sw, sp.groups, nsup, mn);
  } else {  // AutoRound's double_quant_tensor: d = max / nmax, L = min(round(v * (nmax / max)), nmax)
    auto dq = [&](const float* v, int* L) {
      float mx = 0;
      for (int j = 0; j < sp.groups; ++j) mx = std::max(mx, v[j]);
      const float inv = mx > 0 ? float(nsup) * (1.0f / mx) : 0.0f;
      for (int j = 0; j < sp.groups; ++j) L[j] = clampi(rnd(v[j] * inv), 0, nsup);
      return mx / float(nsup);
    };
    d = dq(s, sc);
    dmin = dq(m, mn);
  }
  p.d = fp16(d);
  p.dmin = fp16(dmin);
  for (int j = 0; j < sp.groups; ++j) {
    p.sc[size_t(j)] = sc[j];
    p.mn[size_t(j)] = mn[j];
    const float sj = p.d * float(sc[j]), mj = p.dmin * float(mn[j]);
    for (int i = 0; i < g; ++i)
      p.q[size_t(j * g + i)] = sj > 0 ? clampi(rnd((x[j * g + i] + mj) / sj), 0, sp.q_max) : 0;
  }
  return p;
}

KQuantBlockParams kquant_sym(const KQuantSpec& sp, const float* x, const float* imat) {
  const int g = sp.group_size, nmax = -sp.q_min, bits = bits_of(sp.q_max - sp.q_min + 1);
  float s[16] = {}, wt[16];
  for (int j = 0; j < sp.groups; ++j) {
    const float* xj = x + j * g;
    float sj;
    if (imat) {
      st::imatrix_fix_zeros(imat + j * g, xj, g, bits, wt);
      sj = st::qx_quants(xj, wt, g, nmax);
    } else {
      sj = bits == 3 ? st::q3_quants_rmse(xj, g, nmax) : st::qx_quants(xj, nullptr, g, nmax);
    }
    s[j] = std::fabs(sj) < 1e-30f ? 0.0f : sj;
  }
  // AutoRound's double_quant_tensor_sym_rtn: d = S / -nmax_super, sc = clip(round(s / d)).
  const float S = st::signed_absmax(s, sp.groups), d = S / float(sp.sc_min);
  const float inv = std::fabs(d) >= 1e-30f ? 1.0f / d : 0.0f;
  KQuantBlockParams p;
  p.d = fp16(d);
  for (int j = 0; j < sp.groups; ++j) {
    const int sc = clampi(rnd(s[j] * inv), sp.sc_min, sp.sc_max);
    p.sc[size_t(j)] = sc;
    const float sj = p.d * float(sc);
    for (int i = 0; i < g; ++i)
      p.q[size_t(j * g + i)] = sj != 0 ? clampi(rnd(x[j * g + i] / sj), sp.q_min, sp.q_max) : 0;
  }
  return p;
}

LegacyBlockParams legacy_sym(GgmlType t, const float* x, const float* imat) {
  const int qmin = ggml_legacy_qmin(t), qmax = ggml_legacy_qmax(t);
  float wt[32];
  if (imat) st::imatrix_fix_zeros(imat, x, 32, bits_of(qmax - qmin + 1), wt);
  LegacyBlockParams p;
  p.d = st::int_sym_search(x, imat ? wt : nullptr, 32, qmin, qmax);
  for (int i = 0; i < 32; ++i) p.q[size_t(i)] = p.d != 0 ? clampi(rnd(x[i] / p.d), qmin, qmax) : 0;
  return p;
}

void quantize_row(GgmlType t, const float* w, const float* imat, int64_t cols, uint8_t* out) {
  const int64_t bb = ggml_block_bytes(t), be = ggml_block_elems(t);
  const bool k = ggml_is_kquant(t);
  const KQuantSpec sp = k ? ggml_kquant_spec(t) : KQuantSpec{};
  for (int64_t b = 0; b < cols / be; ++b) {
    const float* x = w + b * be;
    const float* im = imat ? imat + b * be : nullptr;
    uint8_t* o = out + b * bb;
    if (!k)
      ggml_legacy_pack(t, legacy_sym(t, x, im), o);
    else
      ggml_kquant_pack(t, sp.has_min ? kquant_asym(sp, x, im) : kquant_sym(sp, x, im), o);
  }
}
}  // namespace

std::vector<uint8_t> gguf_quantize_search(Context& ctx, GgmlType t, const float* W, int64_t rows, int64_t cols,
                                          const float* imatrix, float* What) {
  double isum = 0;
  if (imatrix)
    for (int64_t c = 0; c < cols; ++c) {
      if (!(imatrix[c] >= 0) || !std::isfinite(imatrix[c]))
        fail(ErrorKind::InvalidInput, "imatrix entry " + std::to_string(c) + " is " + std::to_string(imatrix[c]) +
                                          " (it must be a finite sum of squares, >= 0)");
      isum += imatrix[c];
    }
  const bool searched = ggml_is_kquant(t) || t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q8_0;
  if (!searched) return gguf_quantize_rtn(ctx, t, W, rows, cols, What);
  const int64_t rb = ggml_row_bytes(t, cols);  // checks the block multiple
  // AutoRound: an imatrix summing to 0 is no imatrix (the data-free search).
  const float* imat = isum > 0 ? imatrix : nullptr;
  std::vector<uint8_t> out(size_t(rows * rb));
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      quantize_row(t, W + r * cols, imat, cols, out.data() + r * rb);
      if (What) ggml_dequantize(t, out.data() + r * rb, What + r * cols, cols);
    }
  }, ThreadPool::grain(cols * 64));
  return out;
}

}  // namespace ar::quant
