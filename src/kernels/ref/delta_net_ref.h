// Reference element and row ops of Gated DeltaNet's layer (transformers' Qwen3NextGatedDeltaNet), around
// the gated delta rule (gated_delta_ref.h); each with its backward: the inputs' gradients, and the
// weights' (the conv1d kernel, A_log, dt_bias, the norm weight: no Linear, not tuned) accumulated where
// the caller passes a pointer.
//   causal_conv_silu: y[t, c] = silu(sum_j w[c, j] x[t - (K - 1) + j, c]) over the K latest tokens of the
//                     sequence (zeros before its start): the depthwise Conv1d with padding K - 1, cut to T,
//                     then SiLU; x, y [B, T, C], w [C, K].
//   l2norm:           y = scale x / sqrt(sum x^2 + eps) per row (FLA's l2norm, eps 1e-6; scale: the query's
//                     Dk^-1/2).
//   gated_rmsnorm:    y = w * (x / rms(x)) * silu(z) per row of Dv (Qwen3NextRMSNormGated: norm, then gate).
//   decay_beta:       g = -exp(A_log[h]) softplus(a + dt_bias[h]), beta = sigmoid(b), per (token, head);
//                     softplus as torch's (x itself above 20).
#pragma once
#include <cmath>
#include <cstdint>

namespace ar::ref {

template <class T>
T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <class T>
T softplus_of(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

// x, y [B, T, C]; w [C, K]; z (optional) gets the pre-activation for the backward.
template <class T>
void causal_conv_silu_fwd(const T* x, const T* w, T* y, T* z, int64_t B, int64_t Tn, int64_t C, int64_t K) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= 0) acc += w[c * K + j] * x[(b * Tn + src) * C + c];
        }
        const size_t at = size_t((b * Tn + t) * C + c);
        if (z) z[at] = acc;
        y[at] = acc * sigmoid_of(acc);
      }
}

// dx (written) from dy and the forward's pre-activation z; dw [C, K] += the kernel's gradient (x read).
template <class T>
void causal_conv_silu_bwd(const T* dy, const T* z, const T* x, const T* w, T* dx, T* dw, int64_t B, int64_t Tn,
                          int64_t C, int64_t K) {
  for (int64_t i = 0; i < B * Tn * C; ++i) dx[i] = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const size_t at = size_t((b * Tn + t) * C + c);
        const T s = sigmoid_of(z[at]), dz = dy[at] * s * (T(1) + z[at] * (T(1) - s));
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src < 0) continue;
          dx[(b * Tn + src) * C + c] += w[c * K + j] * dz;
          if (dw) dw[c * K + j] += x[(b * Tn + src) * C + c] * dz;
        }
      }
}

constexpr double kL2NormEps = 1e-6;

template <class T>
void l2norm_fwd(const T* x, T* y, int64_t rows, int64_t dim, T scale = T(1)) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const T inv = scale / std::sqrt(ss + T(kL2NormEps));
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv;
  }
}

// dx = scale (dy - n (n . dy)) / sqrt(sum x^2 + eps) with n = x / sqrt(sum x^2 + eps), from x (written).
template <class T>
void l2norm_bwd(const T* dy, const T* x, T* dx, int64_t rows, int64_t dim, T scale = T(1)) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0, nd = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const T inv = T(1) / std::sqrt(ss + T(kL2NormEps));
    for (int64_t i = 0; i < dim; ++i) nd += x[r * dim + i] * inv * dy[r * dim + i];
    for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] = scale * inv * (dy[r * dim + i] - x[r * dim + i] * inv * nd);
  }
}

template <class T>
void gated_rmsnorm_fwd(const T* x, const T* z, const T* w, T* y, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const T rstd = T(1) / std::sqrt(ss / T(dim) + T(eps));
    for (int64_t i = 0; i < dim; ++i) {
      const T zi = z[r * dim + i];
      y[r * dim + i] = w[i] * (x[r * dim + i] * rstd) * (zi * sigmoid_of(zi));
    }
  }
}

// dx and dz (written) from x, z; dw [dim] += the weight's gradient.
template <class T>
void gated_rmsnorm_bwd(const T* dy, const T* x, const T* z, const T* w, T* dx, T* dz, T* dw, int64_t rows, int64_t dim,
                       double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0, dn_n = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const T rstd = T(1) / std::sqrt(ss / T(dim) + T(eps));
    for (int64_t i = 0; i < dim; ++i) {
      const T zi = z[r * dim + i], s = sigmoid_of(zi), n = x[r * dim + i] * rstd;
      const T dn = dy[r * dim + i] * w[i] * zi * s;
      dz[r * dim + i] = dy[r * dim + i] * w[i] * n * s * (T(1) + zi * (T(1) - s));
      if (dw) dw[i] += dy[r * dim + i] * n * zi * s;
      dn_n += dn * n;
      dx[r * dim + i] = dn;  // dn for now
    }
    for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] = rstd * (dx[r * dim + i] - x[r * dim + i] * rstd * dn_n / T(dim));
  }
}

// a, b, g, beta [rows, H]; A_log, dt_bias [H].
template <class T>
void decay_beta_fwd(const T* a, const T* b, const T* A_log, const T* dt_bias, T* g, T* beta, int64_t rows, int64_t H) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const size_t at = size_t(r * H + h);
      g[at] = -std::exp(A_log[h]) * softplus_of(a[at] + dt_bias[h]);
      beta[at] = sigmoid_of(b[at]);
    }
}

// da, db (written) from dg, dbeta; dA_log, ddt_bias [H] += their gradients.
template <class T>
void decay_beta_bwd(const T* dg, const T* dbeta, const T* a, const T* b, const T* A_log, const T* dt_bias, T* da, T* db,
                    T* dA_log, T* ddt_bias, int64_t rows, int64_t H) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const size_t at = size_t(r * H + h);
      const T x = a[at] + dt_bias[h];
      da[at] = dg[at] * -std::exp(A_log[h]) * (x > T(20) ? T(1) : sigmoid_of(x));
      if (ddt_bias) ddt_bias[h] += da[at];
      if (dA_log) dA_log[h] += dg[at] * -std::exp(A_log[h]) * softplus_of(x);
      const T s = sigmoid_of(b[at]);
      db[at] = dbeta[at] * s * (T(1) - s);
    }
}

}  // namespace ar::ref
