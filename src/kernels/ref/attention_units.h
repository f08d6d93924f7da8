// The reference attention (attention_ref.h) cut into independent units, for a device that runs one
// thread per unit (kernels/cuda/attention.cu). Same semantics and shapes as attention_ref.h; the units
// write disjoint outputs, so they need no atomics and give the same result in any order:
//   forward   one query (b, h, i): lse by an online max/sum over its visible keys, then o = sum p v
//   delta     one query: di = dO . o (the softmax backward's row term)
//   dq        one query: dq = scale sum_j p (dO . v_j - di) k_j
//   dk, dv    one key (b, hkv, j): sums over the query heads of its group and the queries that see it
// Tests run every unit on the CPU in double against attention_ref.h (tests/test_kernel_units.cpp).
#pragma once
#include <cstdint>

#include "core/hd.h"
#include "kernels/ref/attention_ref.h"

namespace ar::ref {

template <class T>
AR_HD bool attn_sees(const AttnShape& s, const uint8_t* key_mask, int64_t b, int64_t i, int64_t j) {
  return attn_in_window(s, i, j) && (!key_mask || key_mask[b * s.Tk + j]);
}

template <class T>
AR_HD T attn_dot(const T* a, const T* b, int64_t D) {
  T acc = 0;
  for (int64_t d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

template <class T>
AR_HD void attn_fwd_query(const AttnShape& s, const T* q, const T* k, const T* v, const uint8_t* key_mask, T* o,
                          T* lse, int64_t b, int64_t h, int64_t i) {
  const T scale = softmax_scale<T>(s);
  const int64_t hk = h / (s.H / s.Hkv);
  const T* qi = q + ((b * s.Tq + i) * s.H + h) * s.D;
  T* oi = o + ((b * s.Tq + i) * s.H + h) * s.D;
  T mx = -hd::infinity<T>(), sum = 0;
  for (int64_t j = 0; j < s.Tk; ++j) {
    if (!attn_sees<T>(s, key_mask, b, i, j)) continue;
    const T sc = attn_dot(qi, k + ((b * s.Tk + j) * s.Hkv + hk) * s.D, s.D) * scale;
    if (sc > mx) {
      sum = sum * hd::exp(mx - sc) + T(1);
      mx = sc;
    } else {
      sum += hd::exp(sc - mx);
    }
  }
  for (int64_t d = 0; d < s.D; ++d) oi[d] = 0;
  const T l = mx == -hd::infinity<T>() ? mx : mx + hd::log(sum);
  lse[(b * s.H + h) * s.Tq + i] = l;
  if (l == -hd::infinity<T>()) return;
  for (int64_t j = 0; j < s.Tk; ++j) {
    if (!attn_sees<T>(s, key_mask, b, i, j)) continue;
    const int64_t ko = ((b * s.Tk + j) * s.Hkv + hk) * s.D;
    const T p = hd::exp(attn_dot(qi, k + ko, s.D) * scale - l);
    for (int64_t d = 0; d < s.D; ++d) oi[d] += p * v[ko + d];
  }
}

// delta[(b * H + h) * Tq + i] = dO . o of that query.
template <class T>
AR_HD void attn_delta_query(const AttnShape& s, const T* o, const T* dout, T* delta, int64_t b, int64_t h, int64_t i) {
  const int64_t qo = ((b * s.Tq + i) * s.H + h) * s.D;
  delta[(b * s.H + h) * s.Tq + i] = attn_dot(dout + qo, o + qo, s.D);
}

// dq of one query (overwritten).
template <class T>
AR_HD void attn_dq_query(const AttnShape& s, const T* q, const T* k, const T* v, const uint8_t* key_mask,
                         const T* lse, const T* delta, const T* dout, T* dq, int64_t b, int64_t h, int64_t i) {
  const T scale = softmax_scale<T>(s);
  const int64_t hk = h / (s.H / s.Hkv), qo = ((b * s.Tq + i) * s.H + h) * s.D, row = (b * s.H + h) * s.Tq + i;
  for (int64_t d = 0; d < s.D; ++d) dq[qo + d] = 0;
  const T l = lse[row];
  if (l == -hd::infinity<T>()) return;
  for (int64_t j = 0; j < s.Tk; ++j) {
    if (!attn_sees<T>(s, key_mask, b, i, j)) continue;
    const int64_t ko = ((b * s.Tk + j) * s.Hkv + hk) * s.D;
    const T p = hd::exp(attn_dot(q + qo, k + ko, s.D) * scale - l);
    const T ds = p * (attn_dot(dout + qo, v + ko, s.D) - delta[row]);
    for (int64_t d = 0; d < s.D; ++d) dq[qo + d] += scale * ds * k[ko + d];
  }
}

// dk and dv of one key of kv head hk (overwritten).
template <class T>
AR_HD void attn_dkv_key(const AttnShape& s, const T* q, const T* k, const T* v, const uint8_t* key_mask, const T* lse,
                        const T* delta, const T* dout, T* dk, T* dv, int64_t b, int64_t hk, int64_t j) {
  const T scale = softmax_scale<T>(s);
  const int64_t grp = s.H / s.Hkv, ko = ((b * s.Tk + j) * s.Hkv + hk) * s.D;
  for (int64_t d = 0; d < s.D; ++d) dk[ko + d] = dv[ko + d] = 0;
  for (int64_t h = hk * grp; h < (hk + 1) * grp; ++h)
    for (int64_t i = 0; i < s.Tq; ++i) {
      if (!attn_sees<T>(s, key_mask, b, i, j)) continue;
      const int64_t qo = ((b * s.Tq + i) * s.H + h) * s.D, row = (b * s.H + h) * s.Tq + i;
      const T l = lse[row];
      if (l == -hd::infinity<T>()) continue;
      const T p = hd::exp(attn_dot(q + qo, k + ko, s.D) * scale - l);
      const T ds = p * (attn_dot(dout + qo, v + ko, s.D) - delta[row]);
      for (int64_t d = 0; d < s.D; ++d) {
        dv[ko + d] += p * dout[qo + d];
        dk[ko + d] += scale * ds * q[qo + d];
      }
    }
}

}  // namespace ar::ref
