// Gated DeltaNet's row and element ops in fp32 (kernels/ref/delta_net_ref.h): the causal depthwise conv
// with SiLU (threads over channel blocks), l2norm and the gated RMSNorm (threads over rows), the decay and
// beta (elementwise). Every output element is computed by one thread in the reference's order; the weight
// gradients (the conv kernel's per channel, the norm weight's and A_log's and dt_bias' over all rows) are
// summed in row order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
inline float sigmoidf(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float softplusf(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
constexpr int64_t kChannelBlock = 64;  // conv channels per work item (contiguous within a token's row)
}  // namespace

void conv_silu_fwd(Context& ctx, const float* x, const float* w, float* y, float* z, int64_t B, int64_t T, int64_t C,
                   int64_t K) {
  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  ctx.pool().parallel_for(B * blocks, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t b = it / blocks, c0 = (it % blocks) * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = c0; c < c1; ++c) {
          float acc = 0;
          for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) acc += w[c * K + j] * x[(b * T + t - (K - 1) + j) * C + c];
          const int64_t at = (b * T + t) * C + c;
          if (z) z[at] = acc;
          y[at] = acc * sigmoidf(acc);
        }
    }
  }, ThreadPool::grain(T * kChannelBlock * K));
}

void conv_silu_bwd(Context& ctx, const float* dy, const float* z, const float* x, const float* w, float* dx, float* dw,
                   int64_t B, int64_t T, int64_t C, int64_t K) {
  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  ctx.pool().parallel_for(blocks, [&](int64_t i0, int64_t i1) {  // a channel's dw sums (b, t) in order
    std::vector<float> dz(size_t(T * kChannelBlock));
    for (int64_t blk = i0; blk < i1; ++blk) {
      const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock), n = c1 - c0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = c0; c < c1; ++c) {
            const int64_t at = (b * T + t) * C + c;
            const float s = sigmoidf(z[at]);
            dz[size_t(t * n + c - c0)] = dy[at] * s * (1.f + z[at] * (1.f - s));
          }
        for (int64_t t = 0; t < T; ++t)  // dx[src] = sum over the outputs that read it, in the reference's order
          for (int64_t c = c0; c < c1; ++c) {
            float acc = 0;
            for (int64_t j = 0; j < K; ++j) {
              const int64_t out = t + (K - 1) - j;
              if (out < T) acc += w[c * K + j] * dz[size_t(out * n + c - c0)];
            }
            dx[(b * T + t) * C + c] = acc;
          }
        if (!dw) continue;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = c0; c < c1; ++c)
            for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j)
              dw[c * K + j] += x[(b * T + t - (K - 1) + j) * C + c] * dz[size_t(t * n + c - c0)];
      }
    }
  }, 1);
}

void l2norm_fwd(Context& ctx, const float* x, float* y, int64_t rows, int64_t dim, float scale) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const float inv = float(double(scale) / std::sqrt(ss + ref::kL2NormEps));
      for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv;
    }
  }, ThreadPool::grain(dim));
}

void l2norm_bwd(Context& ctx, const float* dy, const float* x, float* dx, int64_t rows, int64_t dim, float scale) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double ss = 0, nd = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1 / std::sqrt(ss + ref::kL2NormEps);
      for (int64_t i = 0; i < dim; ++i) nd += double(x[r * dim + i]) * inv * dy[r * dim + i];
      for (int64_t i = 0; i < dim; ++i)
        dx[r * dim + i] = float(double(scale) * inv * (dy[r * dim + i] - x[r * dim + i] * inv * nd));
    }
  }, ThreadPool::grain(dim));
}

void gated_rmsnorm_fwd(Context& ctx, const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t dim,
                       double eps) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const float rstd = float(1.0 / std::sqrt(ss / double(dim) + eps));
      for (int64_t i = 0; i < dim; ++i) {
        const float zi = z[r * dim + i];
        y[r * dim + i] = w[i] * (x[r * dim + i] * rstd) * (zi * sigmoidf(zi));
      }
    }
  }, ThreadPool::grain(dim));
}

void gated_rmsnorm_bwd(Context& ctx, const float* dy, const float* x, const float* z, const float* w, float* dx,
                       float* dz, float* dw, int64_t rows, int64_t dim, double eps) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double ss = 0, dn_n = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const float rstd = float(1.0 / std::sqrt(ss / double(dim) + eps));
      for (int64_t i = 0; i < dim; ++i) {
        const float zi = z[r * dim + i], s = sigmoidf(zi), n = x[r * dim + i] * rstd, d = dy[r * dim + i];
        const float dn = d * w[i] * zi * s;
        dz[r * dim + i] = d * w[i] * n * s * (1.f + zi * (1.f - s));
        dn_n += double(dn) * n;
        dx[r * dim + i] = dn;
      }
      const float m = float(dn_n / double(dim));
      for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] = rstd * (dx[r * dim + i] - x[r * dim + i] * rstd * m);
    }
  }, ThreadPool::grain(dim));
  if (!dw) return;
  for (int64_t r = 0; r < rows; ++r) {  // rows in order
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const float rstd = float(1.0 / std::sqrt(ss / double(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) {
      const float zi = z[r * dim + i];
      dw[i] += dy[r * dim + i] * (x[r * dim + i] * rstd) * zi * sigmoidf(zi);
    }
  }
}

void decay_beta_fwd(Context& ctx, const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                    float* beta, int64_t rows, int64_t H) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t at = r * H + h;
        g[at] = -std::exp(A_log[h]) * softplusf(a[at] + dt_bias[h]);
        beta[at] = sigmoidf(b[at]);
      }
  }, ThreadPool::grain(H * 8));
}

void decay_beta_bwd(Context& ctx, const float* dg, const float* dbeta, const float* a, const float* b,
                    const float* A_log, const float* dt_bias, float* da, float* db, float* dA_log, float* ddt_bias,
                    int64_t rows, int64_t H) {
  ctx.pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t at = r * H + h;
        const float x = a[at] + dt_bias[h], s = sigmoidf(b[at]);
        da[at] = dg[at] * -std::exp(A_log[h]) * (x > 20.f ? 1.f : sigmoidf(x));
        db[at] = dbeta[at] * s * (1.f - s);
      }
  }, ThreadPool::grain(H * 8));
  for (int64_t r = 0; r < rows; ++r)  // rows in order
    for (int64_t h = 0; h < H; ++h) {
      const int64_t at = r * H + h;
      if (ddt_bias) ddt_bias[h] += da[at];
      if (dA_log) dA_log[h] += dg[at] * -std::exp(A_log[h]) * softplusf(a[at] + dt_bias[h]);
    }
}

}  // namespace ar::cpu
