#include "quant/opt_rtn.h"

#include <cmath>

#include "core/error.h"

namespace ar::quant {

void opt_rtn_sym(Context& ctx, const QdqShape& sh, const float* W, const float* imat, float* What, float* scale) {
  if (!sh.sym) fail(ErrorKind::Internal, "optimized RTN is for symmetric int only");
  const int64_t ng = sh.groups();
  const int m = 1 << (sh.bits - 1);
  const double delta = sh.bits == 2 ? 0.01 : 0.0075 * m;
  const int kmax = sh.bits == 2 ? 90 : 100;
  ctx.pool().parallel_for(sh.out, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t g = 0; g < ng; ++g) {
        const int64_t c0 = g * sh.group, c1 = std::min(sh.in, c0 + sh.group);
        const float* w = W + r * sh.in;
        float gmax = 0;  // signed largest magnitude; the positive side wins ties (as RTN's scale rule)
        for (int64_t c = c0; c < c1; ++c)
          if (std::abs(w[c]) > std::abs(gmax) || (std::abs(w[c]) == std::abs(gmax) && w[c] > gmax)) gmax = w[c];
        float best_s = 0;
        double best_err = INFINITY;
        for (int k = -kmax; k <= kmax; ++k) {
          float s = to_fp16(float(-double(gmax) / (double(m) - delta * k)));
          if (std::abs(s) < float(sh.thr)) s = s < 0 ? -float(sh.thr) : float(sh.thr);
          double err = 0;
          for (int64_t c = c0; c < c1; ++c) {
            float q = std::nearbyint(w[c] / s);
            q = q < float(-m) ? float(-m) : q > float(m - 1) ? float(m - 1) : q;
            const double d = double(s * q) - double(w[c]);
            err += (imat ? double(imat[c]) : 1.0) * d * d;
          }
          if (err < best_err || (err == best_err && k == 0)) {
            best_err = err;
            best_s = s;
          }
        }
        scale[r * ng + g] = best_s;
        for (int64_t c = c0; c < c1; ++c) {
          float q = std::nearbyint(w[c] / best_s);
          q = q < float(-m) ? float(-m) : q > float(m - 1) ? float(m - 1) : q;
          What[r * sh.in + c] = best_s * q;
        }
      }
  });
}

double weighted_error(const QdqShape& sh, const float* W, const float* What, const float* imat) {
  double e = 0;
  for (int64_t r = 0; r < sh.out; ++r)
    for (int64_t c = 0; c < sh.in; ++c) {
      const double d = double(What[r * sh.in + c]) - double(W[r * sh.in + c]);
      e += (imat ? double(imat[c]) : 1.0) * d * d;
    }
  return e;
}

}  // namespace ar::quant
