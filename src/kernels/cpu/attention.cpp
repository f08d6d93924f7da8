// Causal GQA attention with a key padding mask on SGEMM. Layouts: q/o [B,Tq,H,D], k/v [B,Tk,Hkv,D],
// lse [B,H,Tq]. Per (batch, head): S = scale Q K^T on BLAS, masked softmax rows on the pool, O = P V.
// Backward recomputes P from lse (nothing of size T^2 is kept between passes):
//   dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o)), dQ = scale dS K, dK += scale dS^T Q.
// Reference: kernels/ref/attention_ref.h.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Visible keys for query i are j in [0, last] with key_mask set.
inline int64_t last_key(const AttnShape& s, int64_t i) { return std::min(s.Tk - 1, i + (s.Tk - s.Tq)); }
}  // namespace

void attention_fwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse) {
  const float scale = 1.f / std::sqrt(float(s.D));
  const int64_t grp = s.H / s.Hkv, qs = s.H * s.D, ks = s.Hkv * s.D;
  std::vector<float> S(size_t(s.Tq * s.Tk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const float* Q = q + b * s.Tq * qs + h * s.D;
      const float* K = k + b * s.Tk * ks + (h / grp) * s.D;
      const float* V = v + b * s.Tk * ks + (h / grp) * s.D;
      const uint8_t* m = key_mask ? key_mask + b * s.Tk : nullptr;
      gemm(ctx, false, true, s.Tq, s.Tk, s.D, scale, Q, qs, K, ks, 0.f, S.data(), s.Tk);
      float* L = lse + (b * s.H + h) * s.Tq;
      ctx.pool().parallel_for(s.Tq, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          float* row = S.data() + i * s.Tk;
          const int64_t last = last_key(s, i);
          float mx = kNegInf;
          for (int64_t j = 0; j <= last; ++j)
            if (!m || m[j]) mx = std::max(mx, row[j]);
          if (mx == kNegInf) {
            for (int64_t j = 0; j < s.Tk; ++j) row[j] = 0.f;
            L[i] = kNegInf;
            continue;
          }
          double sum = 0;
          for (int64_t j = 0; j <= last; ++j) {
            float e = (!m || m[j]) ? std::exp(row[j] - mx) : 0.f;
            row[j] = e;
            sum += e;
          }
          for (int64_t j = last + 1; j < s.Tk; ++j) row[j] = 0.f;
          float inv = float(1.0 / sum);
          for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
          L[i] = mx + float(std::log(sum));
        }
      }, ThreadPool::grain(s.Tk));
      gemm(ctx, false, false, s.Tq, s.D, s.Tk, 1.f, S.data(), s.Tk, V, ks, 0.f, o + b * s.Tq * qs + h * s.D, qs);
    }
}

void attention_bwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* dq, float* dk,
                   float* dv) {
  const float scale = 1.f / std::sqrt(float(s.D));
  const int64_t grp = s.H / s.Hkv, qs = s.H * s.D, ks = s.Hkv * s.D;
  std::vector<float> P(size_t(s.Tq * s.Tk)), dP(size_t(s.Tq * s.Tk));
  std::fill(dk, dk + s.B * s.Tk * ks, 0.f);
  std::fill(dv, dv + s.B * s.Tk * ks, 0.f);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t qoff = b * s.Tq * qs + h * s.D, koff = b * s.Tk * ks + (h / grp) * s.D;
      const float* L = lse + (b * s.H + h) * s.Tq;
      const uint8_t* m = key_mask ? key_mask + b * s.Tk : nullptr;
      gemm(ctx, false, true, s.Tq, s.Tk, s.D, scale, q + qoff, qs, k + koff, ks, 0.f, P.data(), s.Tk);
      ctx.pool().parallel_for(s.Tq, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          float* row = P.data() + i * s.Tk;
          const int64_t last = last_key(s, i);
          for (int64_t j = 0; j < s.Tk; ++j)
            row[j] = (L[i] != kNegInf && j <= last && (!m || m[j])) ? std::exp(row[j] - L[i]) : 0.f;
        }
      }, ThreadPool::grain(s.Tk));
      gemm(ctx, true, false, s.Tk, s.D, s.Tq, 1.f, P.data(), s.Tk, dout + qoff, qs, 1.f, dv + koff, ks);
      gemm(ctx, false, true, s.Tq, s.Tk, s.D, 1.f, dout + qoff, qs, v + koff, ks, 0.f, dP.data(), s.Tk);
      ctx.pool().parallel_for(s.Tq, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const float* dO = dout + qoff + i * qs;
          const float* O = o + qoff + i * qs;
          float di = 0;
          for (int64_t d = 0; d < s.D; ++d) di += dO[d] * O[d];
          float* pr = P.data() + i * s.Tk;
          float* dr = dP.data() + i * s.Tk;
          for (int64_t j = 0; j < s.Tk; ++j) dr[j] = pr[j] * (dr[j] - di);
        }
      }, ThreadPool::grain(s.Tk));
      gemm(ctx, false, false, s.Tq, s.D, s.Tk, scale, dP.data(), s.Tk, k + koff, ks, 0.f, dq + qoff, qs);
      gemm(ctx, true, false, s.Tk, s.D, s.Tq, scale, dP.data(), s.Tk, q + qoff, qs, 1.f, dk + koff, ks);
    }
}

}  // namespace ar::cpu
