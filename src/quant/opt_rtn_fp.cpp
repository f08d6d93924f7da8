#include "quant/opt_rtn_fp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace ar::quant {

bool fp_has_opt_rtn(FpFamily family) { return family == FpFamily::Mx || family == FpFamily::Nvfp4; }

namespace {

std::vector<float> candidates(FpFamily family) {
  if (family == FpFamily::Mx) return {1.0f, 0.5f, 2.0f};
  std::vector<float> c = {1.0f};
  for (int k = 50; k < 152; ++k)
    if (k != 100) c.push_back(float(double(k) / 100.0));
  return c;
}

// The per-element weights qw of tile rows [r0, r1) (columns of the whole row), AutoRound's zero repair
// applied per tile.
void tile_weights(const FpQdqShape& sh, const float* W, const float* imat, int64_t r0, int64_t r1, float* qw) {
  for (int64_t r = r0; r < r1; ++r) {
    float* q = qw + (r - r0) * sh.in;
    for (int64_t c = 0; c < sh.in; ++c) q[c] = imat ? imat[c] : 1.0f;
    if (!imat) continue;
    for (int64_t c0 = 0; c0 < sh.in; c0 += sh.tile_cols) {
      const int64_t c1 = std::min(sh.in, c0 + sh.tile_cols), n = c1 - c0;
      int64_t zeros = 0;
      double sum = 0, sq = 0;
      for (int64_t c = c0; c < c1; ++c) {
        zeros += q[c] <= 1e-30f;
        sum += q[c];
        sq += double(W[r * sh.in + c]) * W[r * sh.in + c];
      }
      if (zeros == 0) continue;
      if (zeros > sh.tile_cols / 2) {
        const float av = float(std::sqrt(sq / 32.0));  // AutoRound's constant 32, whatever the tile
        for (int64_t c = c0; c < c1; ++c) q[c] = std::fabs(W[r * sh.in + c]) + av;
      } else {
        const float mean = float(sum / double(n - zeros));
        for (int64_t c = c0; c < c1; ++c)
          if (q[c] == 0.0f) q[c] = mean;
      }
    }
  }
}

}  // namespace

void fp_opt_rtn_init(Context& ctx, const FpQdqShape& sh, const float* W, const float* imat, float* init) {
  if (!fp_has_opt_rtn(sh.family) || sh.tile_rows != 1)
    fail(ErrorKind::Internal, "fp_opt_rtn_init: no AutoRound search for this float scheme");
  FpQdqShape search = sh;
  if (sh.family == FpFamily::Nvfp4) search.global_scale = nvfp4_global_scale(W, sh.out * sh.in);
  const std::vector<float> cand = candidates(sh.family);
  const int64_t across = sh.tiles_across();
  ctx.pool().parallel_for(sh.out, [&](int64_t r0, int64_t r1) {
    const FpQdqShape part = fp_qdq_tile_rows(search, r0, r1);
    const int64_t n = (r1 - r0) * sh.in, nt = part.tiles(), k = r0 * across;
    const size_t un = static_cast<size_t>(n), unt = static_cast<size_t>(nt);
    std::vector<float> qw(un), amax(unt), coeff(unt), q(un);
    std::vector<double> best(unt, INFINITY);
    tile_weights(sh, W, imat, r0, r1, qw.data());
    fp_qdq_amax(part, W + r0 * sh.in, amax.data());
    for (float c : cand) {
      std::fill(coeff.begin(), coeff.end(), c);
      fp_qdq_fwd(part, W + r0 * sh.in, nullptr, nullptr, coeff.data(), amax.data(), q.data(), nullptr);
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t r = t / across, c0 = (t % across) * sh.tile_cols, c1 = std::min(sh.in, c0 + sh.tile_cols);
        double loss = 0;
        for (int64_t j = r * sh.in + c0; j < r * sh.in + c1; ++j) {
          const double d = double(q[size_t(j)]) - double(W[r0 * sh.in + j]);
          loss += double(qw[size_t(j)]) * d * d;
        }
        if (loss < best[size_t(t)]) {
          best[size_t(t)] = loss;
          init[k + t] = c;
        }
      }
    }
  }, std::max<int64_t>(1, (int64_t(1) << 13) / std::max<int64_t>(1, sh.in)));
}

}  // namespace ar::quant
