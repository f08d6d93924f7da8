// Reference causal grouped-query attention with a key padding mask, an optional sliding window and
// optional attention sinks.
// q [B,Tq,H,D], k/v [B,Tk,Hkv,D] (post-RoPE), H % Hkv == 0, query head h uses kv head h/(H/Hkv).
// Query i sits at absolute position p = i + (Tk - Tq) and sees key j iff j <= p, p - j < window when
// AttnShape::window > 0 (the `window` latest keys, itself included: transformers' sliding window), and
// key_mask[b,j] != 0 (key_mask may be null = all valid). scale = AttnShape::scale, or 1/sqrt(D) when 0
// (MLA's YaRN mscale, Gemma's query_pre_attn_scalar set it).
//   S = scale q k^T (masked to -inf),  P = softmax_j(S),  o = P v,  lse = log sum_j exp(S)
// Sinks (gpt-oss; sinks[h] per query head, null: none) add exp(sinks[h]) to the softmax's denominator and
// nothing to o: lse = log(exp(sinks[h]) + sum_j exp(S)).
// A query with no visible key and no sink gets o = 0 and lse = -inf (and no gradient).
// Backward: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o)), dQ = scale dS K, dK = scale dS^T Q
// (unchanged by sinks, whose mass is in lse); a sink's own gradient is attention_sink_grad's.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/hd.h"

namespace ar::ref {

struct AttnShape {
  int64_t B, Tq, Tk, H, Hkv, D;
  double scale = 0;    // the softmax's scale of q k^T; 0: 1/sqrt(D)
  int64_t window = 0;  // sliding window: a query sees its `window` latest keys (0: every earlier key)
};

// Whether query i may see key j by position: causal, and within the sliding window.
AR_HD inline bool attn_in_window(const AttnShape& s, int64_t i, int64_t j) {
  const int64_t p = i + (s.Tk - s.Tq);
  return j <= p && (s.window <= 0 || p - j < s.window);
}

// The scale in T: AttnShape::scale, or 1/sqrt(D) computed in T (fp32 kernels: 1.f / sqrtf(D)).
template <class T>
AR_HD T softmax_scale(const AttnShape& s) {
  return s.scale > 0 ? T(s.scale) : T(1) / hd::sqrt(T(s.D));
}

template <class T>
bool attn_visible(const AttnShape& s, const uint8_t* key_mask, int64_t b, int64_t i, int64_t j) {
  return attn_in_window(s, i, j) && (!key_mask || key_mask[b * s.Tk + j]);
}

template <class T>
void attention_fwd(const AttnShape& s, const T* q, const T* k, const T* v, const uint8_t* key_mask, T* o, T* lse,
                   const T* sinks = nullptr) {
  const T scale = softmax_scale<T>(s);
  const int64_t grp = s.H / s.Hkv;
  std::vector<T> p(size_t(s.Tk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Tq; ++i) {
        const T* qi = q + ((b * s.Tq + i) * s.H + h) * s.D;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < s.Tk; ++j) {
          if (!attn_visible<T>(s, key_mask, b, i, j)) continue;
          const T* kj = k + ((b * s.Tk + j) * s.Hkv + h / grp) * s.D;
          T acc = 0;
          for (int64_t d = 0; d < s.D; ++d) acc += qi[d] * kj[d];
          p[j] = acc * scale;
          if (p[j] > mx) mx = p[j];
        }
        T* oi = o + ((b * s.Tq + i) * s.H + h) * s.D;
        for (int64_t d = 0; d < s.D; ++d) oi[d] = 0;
        if (sinks && sinks[h] > mx) mx = sinks[h];
        if (mx == -std::numeric_limits<T>::infinity()) {
          lse[(b * s.H + h) * s.Tq + i] = mx;
          continue;
        }
        T sum = sinks ? std::exp(sinks[h] - mx) : T(0);
        for (int64_t j = 0; j < s.Tk; ++j)
          if (attn_visible<T>(s, key_mask, b, i, j)) sum += std::exp(p[j] - mx);
        T l = mx + std::log(sum);
        lse[(b * s.H + h) * s.Tq + i] = l;
        for (int64_t j = 0; j < s.Tk; ++j) {
          if (!attn_visible<T>(s, key_mask, b, i, j)) continue;
          T pj = std::exp(p[j] - l);
          const T* vj = v + ((b * s.Tk + j) * s.Hkv + h / grp) * s.D;
          for (int64_t d = 0; d < s.D; ++d) oi[d] += pj * vj[d];
        }
      }
}

// dq, dk, dv are overwritten.
template <class T>
void attention_bwd(const AttnShape& s, const T* q, const T* k, const T* v, const uint8_t* key_mask, const T* o,
                   const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  const T scale = softmax_scale<T>(s);
  const int64_t grp = s.H / s.Hkv;
  for (int64_t n = 0; n < s.B * s.Tq * s.H * s.D; ++n) dq[n] = 0;
  for (int64_t n = 0; n < s.B * s.Tk * s.Hkv * s.D; ++n) dk[n] = dv[n] = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Tq; ++i) {
        T l = lse[(b * s.H + h) * s.Tq + i];
        if (l == -std::numeric_limits<T>::infinity()) continue;
        const int64_t qo = ((b * s.Tq + i) * s.H + h) * s.D;
        T di = 0;
        for (int64_t d = 0; d < s.D; ++d) di += dout[qo + d] * o[qo + d];
        for (int64_t j = 0; j < s.Tk; ++j) {
          if (!attn_visible<T>(s, key_mask, b, i, j)) continue;
          const int64_t ko = ((b * s.Tk + j) * s.Hkv + h / grp) * s.D;
          T sc = 0, dp = 0;
          for (int64_t d = 0; d < s.D; ++d) {
            sc += q[qo + d] * k[ko + d];
            dp += dout[qo + d] * v[ko + d];
          }
          T p = std::exp(sc * scale - l);
          T ds = p * (dp - di);
          for (int64_t d = 0; d < s.D; ++d) {
            dv[ko + d] += p * dout[qo + d];
            dq[qo + d] += scale * ds * k[ko + d];
            dk[ko + d] += scale * ds * q[qo + d];
          }
        }
      }
}

// The sinks' gradient (attention_fwd with sinks): the sink's probability is exp(sinks[h] - lse) in every
// query row of head h, and its logit's gradient -exp(sinks[h] - lse) rowsum(dO o); dsinks is overwritten.
template <class T>
void attention_sink_grad(const AttnShape& s, const T* sinks, const T* o, const T* lse, const T* dout, T* dsinks) {
  for (int64_t h = 0; h < s.H; ++h) {
    T g = 0;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t i = 0; i < s.Tq; ++i) {
        const T l = lse[(b * s.H + h) * s.Tq + i];
        if (l == -std::numeric_limits<T>::infinity()) continue;
        const int64_t qo = ((b * s.Tq + i) * s.H + h) * s.D;
        T di = 0;
        for (int64_t d = 0; d < s.D; ++d) di += dout[qo + d] * o[qo + d];
        g -= std::exp(sinks[h] - l) * di;
      }
    dsinks[h] = g;
  }
}

}  // namespace ar::ref
