// Causal GQA attention with a key padding mask on fp32 GEMMs. Layouts: q/o [B,Tq,H,D], k/v [B,Tk,Hkv,D],
// lse [B,H,Tq]. Per (batch, head): S = scale Q K^T, masked softmax rows, O = P V; the pool's threads
// take whole (batch, KV head) groups.
// Backward recomputes P from lse (nothing of size T^2 is kept between passes):
//   dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o)), dQ = scale dS K, dK += scale dS^T Q.
// Reference: kernels/ref/attention_ref.h.
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Visible keys for query i are j in [0, last] with key_mask set.
inline int64_t last_key(const AttnShape& s, int64_t i) { return std::min(s.Tk - 1, i + (s.Tk - s.Tq)); }


// One (batch, KV head) group per task: its query heads in order, GEMMs on the task's thread
// (gemm_serial: the same units and bits as gemm). Heads sharing a KV head accumulate dK/dV in head
// order inside one task, so the sums do not depend on the thread count.
void for_kv_groups(Context& ctx, const AttnShape& s, const std::function<void(int64_t b, int64_t kvh)>& fn) {
  ctx.pool().parallel_for(s.B * s.Hkv, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) fn(t / s.Hkv, t % s.Hkv);
  }, 1);
}

void softmax_rows(const AttnShape& s, const uint8_t* m, float* S, float* L) {
  for (int64_t i = 0; i < s.Tq; ++i) {
    float* row = S + i * s.Tk;
    const int64_t last = last_key(s, i);
    float mx = kNegInf;
    for (int64_t j = 0; j <= last; ++j)
      if (!m || m[j]) mx = std::max(mx, row[j]);
    if (mx == kNegInf) {
      for (int64_t j = 0; j < s.Tk; ++j) row[j] = 0.f;
      L[i] = kNegInf;
      continue;
    }
    for (int64_t j = 0; j <= last; ++j) row[j] -= mx;
    exp_inplace(row, last + 1);
    double sum = 0;
    for (int64_t j = 0; j <= last; ++j) {
      if (m && !m[j]) row[j] = 0.f;
      sum += row[j];
    }
    for (int64_t j = last + 1; j < s.Tk; ++j) row[j] = 0.f;
    float inv = float(1.0 / sum);
    for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
    L[i] = mx + float(std::log(sum));
  }
}
}  // namespace

void attention_fwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse) {
  const float scale = 1.f / std::sqrt(float(s.D));
  const int64_t grp = s.H / s.Hkv, qs = s.H * s.D, ks = s.Hkv * s.D;
  for_kv_groups(ctx, s, [&](int64_t b, int64_t kvh) {
    Tensor St = Tensor::empty({s.Tq * s.Tk}, DType::F32, ctx);  // the context's cached allocator
    float* S = St.f32();
    const float* K = k + b * s.Tk * ks + kvh * s.D;
    const float* V = v + b * s.Tk * ks + kvh * s.D;
    const uint8_t* m = key_mask ? key_mask + b * s.Tk : nullptr;
    for (int64_t h = kvh * grp; h < (kvh + 1) * grp; ++h) {
      const float* Q = q + b * s.Tq * qs + h * s.D;
      gemm_serial(ctx, false, true, s.Tq, s.Tk, s.D, scale, Q, qs, K, ks, 0.f, S, s.Tk);
      softmax_rows(s, m, S, lse + (b * s.H + h) * s.Tq);
      gemm_serial(ctx, false, false, s.Tq, s.D, s.Tk, 1.f, S, s.Tk, V, ks, 0.f, o + b * s.Tq * qs + h * s.D, qs);
    }
  });
}

void attention_bwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* dq, float* dk,
                   float* dv) {
  const float scale = 1.f / std::sqrt(float(s.D));
  const int64_t grp = s.H / s.Hkv, qs = s.H * s.D, ks = s.Hkv * s.D;
  for_kv_groups(ctx, s, [&](int64_t b, int64_t kvh) {
    Tensor Pt = Tensor::empty({s.Tq * s.Tk}, DType::F32, ctx), dPt = Tensor::empty({s.Tq * s.Tk}, DType::F32, ctx);
    float* P = Pt.f32();
    float* dP = dPt.f32();
    const int64_t koff = b * s.Tk * ks + kvh * s.D;
    for (int64_t t = 0; t < s.Tk; ++t)
      for (int64_t d = 0; d < s.D; ++d) dk[koff + t * ks + d] = dv[koff + t * ks + d] = 0.f;
    const uint8_t* m = key_mask ? key_mask + b * s.Tk : nullptr;
    for (int64_t h = kvh * grp; h < (kvh + 1) * grp; ++h) {
      const int64_t qoff = b * s.Tq * qs + h * s.D;
      const float* L = lse + (b * s.H + h) * s.Tq;
      gemm_serial(ctx, false, true, s.Tq, s.Tk, s.D, scale, q + qoff, qs, k + koff, ks, 0.f, P, s.Tk);
      for (int64_t i = 0; i < s.Tq; ++i) {
        float* row = P + i * s.Tk;
        const int64_t last = L[i] == kNegInf ? -1 : last_key(s, i);  // a row without keys is all zero
        for (int64_t j = 0; j <= last; ++j) row[j] -= L[i];
        exp_inplace(row, last + 1);
        for (int64_t j = 0; j < s.Tk; ++j)
          if (j > last || (m && !m[j])) row[j] = 0.f;
      }
      gemm_serial(ctx, true, false, s.Tk, s.D, s.Tq, 1.f, P, s.Tk, dout + qoff, qs, 1.f, dv + koff, ks);
      gemm_serial(ctx, false, true, s.Tq, s.Tk, s.D, 1.f, dout + qoff, qs, v + koff, ks, 0.f, dP, s.Tk);
      for (int64_t i = 0; i < s.Tq; ++i) {
        const float* dO = dout + qoff + i * qs;
        const float* O = o + qoff + i * qs;
        float di = 0;
        for (int64_t d = 0; d < s.D; ++d) di += dO[d] * O[d];
        float* pr = P + i * s.Tk;
        float* dr = dP + i * s.Tk;
        for (int64_t j = 0; j < s.Tk; ++j) dr[j] = pr[j] * (dr[j] - di);
      }
      gemm_serial(ctx, false, false, s.Tq, s.D, s.Tk, scale, dP, s.Tk, k + koff, ks, 0.f, dq + qoff, qs);
      gemm_serial(ctx, true, false, s.Tk, s.D, s.Tq, scale, dP, s.Tk, q + qoff, qs, 1.f, dk + koff, ks);
    }
  });
}

}  // namespace ar::cpu
