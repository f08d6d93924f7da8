#include "quant/gguf_search_steps.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace ar::quant::gguf_steps {

namespace {
// torch.round and llama.cpp's nearest_int both round half to even.
float rnd(float v) { return std::nearbyint(v); }
float clampf(float v, float lo, float hi) { return std::min(hi, std::max(lo, v)); }
// AutoRound's get_reciprocal for fp32: 0 where |v| < 1e-30.
float recip(float v) { return std::fabs(v) >= 1e-30f ? 1.0f / v : 0.0f; }
float fp16(float v) { return f16_to_f32(f32_to_f16(v)); }
}  // namespace

float signed_absmax(const float* x, int n) {
  float best = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  return best;
}

void imatrix_fix_zeros(const float* imat, const float* x, int n, int bits, float* out) {
  int zeros = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    zeros += imat[i] <= 1e-30f;
    sum += imat[i];
  }
  // AutoRound's threshold: half of its group size argument (16 for 2 bits, else 32), whatever the
  // group's real size. A group of only zeros always falls back (AutoRound: 0/0 for q3_k/q6_k).
  const int half = bits == 2 ? 8 : 16;
  if (zeros > half || zeros == n) {
    double sx2 = 0;
    for (int i = 0; i < n; ++i) sx2 += double(x[i]) * x[i];
    const float av = bits <= 3 ? 0.0f : float(std::sqrt(sx2 / 32.0));  // 32 as AutoRound, not n
    for (int i = 0; i < n; ++i) out[i] = std::fabs(x[i]) + av;
    return;
  }
  const float mean = zeros ? float(sum / double(n - zeros)) : 0.0f;
  for (int i = 0; i < n; ++i) out[i] = imat[i] == 0.0f ? mean : imat[i];
}

AsymFit wls_asym_search(const float* x, const float* w, int n, int qmax, float rrmin, float rdelta, int nstep,
                        bool mad) {
  float rmin = 0, rmax = x[0];
  double sum_w = 0, sum_x = 0;
  for (int i = 0; i < n; ++i) {
    rmin = std::min(rmin, x[i]);
    rmax = std::max(rmax, x[i]);
    sum_w += w[i];
    sum_x += double(w[i]) * x[i];
  }
  const float fq = float(qmax);
  // Weighted error of x ~ scale * clamp(round((x - mn) * iscale)) + mn.
  auto error = [&](float scale, float iscale, float mn) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const float l = clampf(rnd((x[i] - mn) * iscale), 0.0f, fq);
      const double diff = double(scale * l + mn) - double(x[i]);
      e += double(w[i]) * (mad ? std::fabs(diff) : diff * diff);
    }
    return e;
  };
  float best_scale = (rmax - rmin) / fq, best_min = rmin;
  double best = error(best_scale, recip(best_scale), best_min);
  for (int k = 0; k < nstep; ++k) {
    const float scale_k = (rmax - rmin) / (rrmin + rdelta * float(k) + fq), iscale_k = recip(scale_k);
    double sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const double l = clampf(rnd((x[i] - rmin) * iscale_k), 0.0f, fq), wl = double(w[i]) * l;
      sl += wl;
      sl2 += wl * l;
      sxl += wl * x[i];
    }
    const double D = sum_w * sl2 - sl * sl;
    if (!(D > 0)) continue;
    float this_scale = float((sum_w * sxl - sum_x * sl) / D), this_min = float((sl2 * sum_x - sl * sxl) / D);
    if (this_min > 0) {
      this_min = 0;
      this_scale = float(sxl / sl2);
    }
    // Not in AutoRound: a non-positive or non-finite slope cannot be written (ggml's sub-scales are
    // unsigned); it only arises in degenerate groups, where the min-max start is kept instead.
    if (!(this_scale > 0) || !std::isfinite(this_scale)) continue;
    const double e = error(this_scale, recip(this_scale), this_min);
    if (e < best) {
      best = e;
      best_scale = this_scale;
      best_min = this_min;
    }
  }
  return {best_scale, -best_min};
}

float qp_quants(const float* v, const float* w, int n, int nmax, int* L) {
  float mx = v[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, v[i]);
  const float fn = float(nmax);
  auto mse = [&](float scale, float iscale) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const float l = clampf(rnd(iscale * v[i]), 0.0f, fn);
      const double diff = double(v[i]) - double(scale * l);
      e += double(w[i]) * diff * diff;
    }
    return e;
  };
  float iscale = recip(mx / fn);
  double best = mse(mx / fn, iscale);
  for (int k = -4; k <= 4; ++k) {
    if (k == 0) continue;
    const float scale_k = mx / (0.1f * float(k) + fn), iscale_k = recip(scale_k);
    const double e = mse(scale_k, iscale_k);
    if (e < best) {
      best = e;
      iscale = iscale_k;
    }
  }
  double sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = int(clampf(rnd(iscale * v[i]), 0.0f, fn));
    sumlx += double(w[i]) * v[i] * L[i];
    suml2 += double(w[i]) * L[i] * L[i];
  }
  return suml2 > 0 ? float(sumlx / suml2) : mx / fn;
}

float qx_quants(const float* x, const float* w, int n, int nmax) {
  const float mx = signed_absmax(x, n);
  if (mx == 0.0f) return 0.0f;
  auto sums = [&](float iscale, double& sumlx, double& suml2) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const double l = clampf(rnd(iscale * x[i]), float(-nmax), float(nmax - 1));
      const double wi = w ? double(w[i]) : double(x[i]) * x[i];
      sumlx += wi * x[i] * l;
      suml2 += wi * l * l;
    }
  };
  double sumlx, suml2;
  sums(-float(nmax) / mx, sumlx, suml2);
  double scale = suml2 > 0 ? sumlx / suml2 : 0.0, best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    double slx, sl2;
    sums(-(float(nmax) - 0.1f * float(k)) / mx, slx, sl2);  // AutoRound's order of k
    if (sl2 > 0 && slx * slx > best * sl2) {
      scale = slx / sl2;
      best = scale * slx;
    }
  }
  return float(scale);
}

float q3_quants_rmse(const float* x, int n, int nmax) {
  const float mx = signed_absmax(x, n);
  if (mx == 0.0f) return 0.0f;
  const float iscale = -float(nmax) / mx;
  int L[256];
  double sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = int(clampf(rnd(iscale * x[i]), float(-nmax), float(nmax - 1)));
    const double wi = double(x[i]) * x[i];
    sumlx += wi * x[i] * L[i];
    suml2 += wi * L[i] * L[i];
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const double wi = double(x[i]) * x[i];
      double slx = sumlx - wi * x[i] * L[i];
      if (!(slx > 0)) continue;
      double sl2 = suml2 - wi * L[i] * L[i];
      const int nl = int(clampf(rnd(float(x[i] * sl2 / slx)), float(-nmax), float(nmax - 1)));
      if (nl == L[i]) continue;
      slx += wi * x[i] * nl;
      sl2 += wi * nl * nl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = nl;
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  return suml2 > 0 ? float(sumlx / suml2) : 0.0f;
}

float int_sym_search(const float* x, const float* w, int n, int qmin, int qmax) {
  const float gmax = signed_absmax(x, n);
  if (gmax == 0.0f) return 0.0f;
  const int m = -qmin;
  const double step = 0.0075 * m;
  auto error = [&](float d) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const float q = d != 0.0f ? clampf(rnd(x[i] / d), float(qmin), float(qmax)) : 0.0f;
      const double diff = double(d * q) - double(x[i]);
      e += (w ? double(w[i]) : 1.0) * diff * diff;
    }
    return e;
  };
  float best_d = fp16(float(double(gmax) / -double(m)));
  double best = error(best_d);
  for (int k = -100; k <= 100; ++k) {
    if (k == 0) continue;
    const float d = fp16(float(double(gmax) / -(double(m) - step * k)));
    if (d == 0.0f || !std::isfinite(d)) continue;
    const double e = error(d);
    if (e < best) {
      best = e;
      best_d = d;
    }
  }
  return best_d;
}

}  // namespace ar::quant::gguf_steps
