// Log-softmax and cross-entropy over logits [rows, V]; row statistics in double.
// Reference: kernels/ref/xent_ref.h.
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
double row_lse(const float* z, int64_t V) {
  float mx = z[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, z[v]);
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(double(z[v]) - mx);
  return mx + std::log(s);
}
}  // namespace

void log_softmax(Context& ctx, const float* z, float* logp, int64_t rows, int64_t V) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double l = row_lse(z + r * V, V);
      for (int64_t v = 0; v < V; ++v) logp[r * V + v] = float(double(z[r * V + v]) - l);
    }
  });
}

double cross_entropy(Context& ctx, const float* z, const int32_t* targets, float* dz, float dloss, int64_t rows,
                     int64_t V) {
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) n += targets[r] >= 0;
  std::vector<double> loss(size_t(rows), 0.0);
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* zr = z + r * V;
      double l = row_lse(zr, V);
      if (targets[r] >= 0) loss[size_t(r)] = l - zr[targets[r]];
      if (!dz) continue;
      float* dr = dz + r * V;
      if (targets[r] < 0) {
        for (int64_t v = 0; v < V; ++v) dr[v] = 0.f;
        continue;
      }
      double sc = double(dloss) / double(n);
      for (int64_t v = 0; v < V; ++v) dr[v] = float(sc * (std::exp(double(zr[v]) - l) - double(v == targets[r])));
    }
  });
  double total = 0;
  for (double x : loss) total += x;
  return n ? total / double(n) : 0.0;
}

}  // namespace ar::cpu
