// Fake quantization (quantize -> dequantize) of one Linear weight with SignRound's tunables, forward
// and straight-through backward, AutoRound's formulas (autoround-spec.md §2). Templated on the float
// type: tests run it in double, the CPU path (qdq.cpp) runs it in fp32 over row ranges in parallel.
//
// Layout: W [out, in] is cut along `in` into n_groups = ceil(in / g) groups of g (zero-padded);
// V [out, n_groups * g] (padded columns ignored), alpha/beta/scale/zero [out * n_groups].
// wmin0 = min(min w, 0), wmax0 = max(max w, 0) per group, from the FP weight (not tuned).
// alpha, beta are clamped to [0, 1] before use (gradient 0 where they are outside; the tuner clamps
// them in place after every step, as AutoRound clamps min_scale/max_scale before every forward).
//  sym ("full range", m = 2^(b-1)):  A = -alpha wmin0, B = beta wmax0,
//        s = (B < A ? +A : -B) / m -> fp16 -> |s| >= thr keeping the sign;
//        q = clamp(round(w/s + V), -m, m-1);  w^ = s q
//  asym (M = 2^b - 1): lo = alpha wmin0, hi = beta wmax0, s = max((hi - lo)/M -> fp16, thr),
//        z = round(-lo / s);  q = clamp(round(w/s + V) + z, 0, M);  w^ = s (q - z)
// Backward (STE: d round(x)/dx = 1; clamp passes the gradient only inside its range; the fp16 cast is
// identity for gradients): dV = s dw^ (unclamped entries), and dalpha, dbeta through s (and z).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace ar::quant {

struct QdqShape {
  int64_t out = 0, in = 0, group = 0;  // group = effective group size (in when the spec says -1)
  int bits = 4;
  bool sym = true;
  double thr = 1e-5;  // minimum |scale| (1e-5 for fp16 scales)
  int64_t groups() const { return (in + group - 1) / group; }
  // Code range: [-2^(b-1), 2^(b-1) - 1] symmetric, [0, 2^b - 1] asymmetric.
  int64_t qmin() const { return sym ? -(int64_t(1) << (bits - 1)) : 0; }
  int64_t qmax() const { return sym ? (int64_t(1) << (bits - 1)) - 1 : (int64_t(1) << bits) - 1; }
};

template <class T>
T round_half_even(T x) {
  return std::nearbyint(x);  // default FP environment: round to nearest, ties to even
}

template <class T>
T to_fp16(T s) {
  return T(f16_to_f32(f32_to_f16(float(s))));
}

template <class T>
T clamp01(T a) {
  return a < T(0) ? T(0) : a > T(1) ? T(1) : a;
}

// wmin0/wmax0 per group (padding counts as zeros, as AutoRound's zero-padded groups do).
template <class T>
void qdq_minmax(const QdqShape& sh, const T* W, T* wmin0, T* wmax0, int64_t r0, int64_t r1) {
  const int64_t ng = sh.groups();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      T lo = 0, hi = 0;
      for (int64_t c = gi * sh.group; c < std::min(sh.in, (gi + 1) * sh.group); ++c) {
        T w = W[r * sh.in + c];
        lo = w < lo ? w : lo;
        hi = w > hi ? w : hi;
      }
      wmin0[r * ng + gi] = lo;
      wmax0[r * ng + gi] = hi;
    }
}

// Scale (and zero point) of one group; also reports which side set a sym scale and whether the
// threshold clamp fired (both needed by the backward pass).
template <class T>
struct GroupScale {
  T s = 1, z = 0;
  bool from_min = false, clamped = false;
};

template <class T>
GroupScale<T> group_scale(const QdqShape& sh, T a, T b, T lo0, T hi0) {
  GroupScale<T> g;
  if (sh.sym) {
    const T m = T(int64_t(1) << (sh.bits - 1));
    T A = -a * lo0, B = b * hi0;
    g.from_min = B < A;
    T s = to_fp16((g.from_min ? A : -B) / m);
    if (std::abs(s) < T(sh.thr)) {
      g.clamped = true;
      s = s < T(0) ? -T(sh.thr) : T(sh.thr);
    }
    g.s = s;
  } else {
    const T M = T((int64_t(1) << sh.bits) - 1);
    T s = to_fp16((b * hi0 - a * lo0) / M);
    if (s < T(sh.thr)) {
      g.clamped = true;
      s = T(sh.thr);
    }
    g.s = s;
    g.z = round_half_even(-a * lo0 / s);
  }
  return g;
}

// Stores a QDQ value in the output format: T itself, or bf16 (uint16_t, round to nearest even) for
// the --amp GEMM operand.
template <class T>
void store_qdq(T* p, T v) { *p = v; }
inline void store_qdq(uint16_t* p, float v) { *p = f32_to_bf16(v); }

// Forward over rows [r0, r1). V, alpha, beta may be null (0, 1, 1). scale/zero (optional) get the
// per-group values, for packing. Out = T, or uint16_t (bf16) with T = float.
template <class T, class Out = T>
void qdq_fwd(const QdqShape& sh, const T* W, const T* V, const T* alpha, const T* beta, const T* wmin0,
             const T* wmax0, Out* What, T* scale, T* zero, int64_t r0, int64_t r1) {
  const int64_t ng = sh.groups(), vw = ng * sh.group;
  const T lo_q = T(sh.qmin()), hi_q = T(sh.qmax());
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t k = r * ng + gi;
      T a = alpha ? clamp01(alpha[k]) : T(1), b = beta ? clamp01(beta[k]) : T(1);
      GroupScale<T> g = group_scale(sh, a, b, wmin0[k], wmax0[k]);
      if (scale) scale[k] = g.s;
      if (zero) zero[k] = g.z;
      for (int64_t c = gi * sh.group; c < std::min(sh.in, (gi + 1) * sh.group); ++c) {
        T v = V ? V[r * vw + c] : T(0);
        T q = round_half_even(W[r * sh.in + c] / g.s + v) + g.z;
        q = q < lo_q ? lo_q : q > hi_q ? hi_q : q;
        store_qdq(What + r * sh.in + c, T(g.s * (q - g.z)));
      }
    }
}

// The sums of a group's backward pass in one fixed order that the scalar and the 16-lane paths
// (qdq_bwd_simd.cpp) share: element c of a group (counted from the group's start) adds, by fma, into
// partial c mod 16; the 16 partials then combine pairwise (0+1, 2+3, ..., then pairs of pairs).
constexpr int kQdqLanes = 16;

template <class T>
T combine_lanes(T* p) {
  for (int w = 1; w < kQdqLanes; w *= 2)
    for (int i = 0; i < kQdqLanes; i += 2 * w) p[i] += p[i + w];
  return p[0];
}

// dalpha, dbeta of group k from its sums ds = dL/ds and dz = dL/dz (straight-through estimator).
template <class T>
void group_grads(const QdqShape& sh, const GroupScale<T>& g, T ar, T br, T a, T lo0, T hi0, T ds, T dz, T* dalpha,
                 T* dbeta) {
  T da = 0, db = 0;
  if (sh.sym) {
    if (!g.clamped) {
      const T m = T(int64_t(1) << (sh.bits - 1));
      if (g.from_min) da = ds * (-lo0) / m;  // s = -a lo0 / m
      else db = ds * (-hi0) / m;              // s = -b hi0 / m
    }
  } else {
    const T M = T((int64_t(1) << sh.bits) - 1);
    // z = round(-a lo0 / s): dz/da = -lo0 / s, dz/ds = a lo0 / s^2 (STE)
    T ds_total = ds + dz * (a * lo0) / (g.s * g.s);
    if (g.clamped) ds_total = 0;
    da = ds_total * (-lo0) / M + dz * (-lo0) / g.s;
    db = ds_total * hi0 / M;
  }
  if (dalpha) *dalpha = (ar >= T(0) && ar <= T(1)) ? da : T(0);
  if (dbeta) *dbeta = (br >= T(0) && br <= T(1)) ? db : T(0);
}

// Backward of one group over its columns [c0, c1) of row r: dV (if wanted), and the sums ds, dz.
//   w^ = s (q - z), q = clamp(round(w/s + v) + z): dV = in ? d s : 0, ds += d ((q - z) - (in ? w/s : 0)),
//   dz -= (in ? 0 : d s).
template <class T>
void group_bwd(const QdqShape& sh, const GroupScale<T>& g, const T* W, const T* V, const T* dWhat, T* dV, int64_t len,
               T& ds, T& dz) {
  const T lo_q = T(sh.qmin()), hi_q = T(sh.qmax());
  T ps[kQdqLanes] = {}, pz[kQdqLanes] = {};
  for (int64_t c = 0; c < len; ++c) {
    const T w = W[c], v = V ? V[c] : T(0), d = dWhat[c];
    const T ws = w / g.s;
    const T rq = round_half_even(ws + v) + g.z;
    const bool in = rq >= lo_q && rq <= hi_q;
    const T q = in ? rq : (rq < lo_q ? lo_q : hi_q);
    if (dV) dV[c] = in ? d * g.s : T(0);
    const T t = (q - g.z) + (in ? -ws : T(0));
    const int j = int(c % kQdqLanes);
    ps[j] = std::fma(d, t, ps[j]);
    if (!in) pz[j] = std::fma(-d, g.s, pz[j]);
  }
  ds = combine_lanes(ps);
  dz = combine_lanes(pz);
}

// Backward over rows [r0, r1): dV (overwritten for the rows' real columns), dalpha, dbeta
// (overwritten) from dWhat. Null outputs are skipped.
template <class T>
void qdq_bwd(const QdqShape& sh, const T* W, const T* V, const T* alpha, const T* beta, const T* wmin0,
             const T* wmax0, const T* dWhat, T* dV, T* dalpha, T* dbeta, int64_t r0, int64_t r1) {
  const int64_t ng = sh.groups(), vw = ng * sh.group;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t k = r * ng + gi, c0 = gi * sh.group, len = std::min(sh.in, c0 + sh.group) - c0;
      const T ar = alpha ? alpha[k] : T(1), br = beta ? beta[k] : T(1), a = clamp01(ar);
      const GroupScale<T> g = group_scale(sh, a, clamp01(br), wmin0[k], wmax0[k]);
      T ds = 0, dz = 0;
      group_bwd(sh, g, W + r * sh.in + c0, V ? V + r * vw + c0 : nullptr, dWhat + r * sh.in + c0,
                dV ? dV + r * vw + c0 : nullptr, len, ds, dz);
      group_grads(sh, g, ar, br, a, wmin0[k], wmax0[k], ds, dz, dalpha ? dalpha + k : nullptr,
                  dbeta ? dbeta + k : nullptr);
    }
}

}  // namespace ar::quant
