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
#include "core/hd.h"

namespace ar::quant {

struct QdqShape {
  int64_t out = 0, in = 0, group = 0;  // group = effective group size (in when the spec says -1)
  int bits = 4;
  bool sym = true;
  double thr = 1e-5;  // minimum |scale| (1e-5 for fp16 scales)
  AR_HD int64_t groups() const { return (in + group - 1) / group; }
  // Code range: [-2^(b-1), 2^(b-1) - 1] symmetric, [0, 2^b - 1] asymmetric.
  AR_HD int64_t qmin() const { return sym ? -(int64_t(1) << (bits - 1)) : 0; }
  AR_HD int64_t qmax() const { return sym ? (int64_t(1) << (bits - 1)) - 1 : (int64_t(1) << bits) - 1; }
};

template <class T>
AR_HD T round_half_even(T x) {
  return hd::rint(x);  // round to nearest, ties to even
}

template <class T>
AR_HD T to_fp16(T s) {
  return T(f16_to_f32(f32_to_f16(float(s))));
}

template <class T>
AR_HD T clamp01(T a) {
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
AR_HD GroupScale<T> group_scale(const QdqShape& sh, T a, T b, T lo0, T hi0) {
  GroupScale<T> g;
  if (sh.sym) {
    const T m = T(int64_t(1) << (sh.bits - 1));
    T A = -a * lo0, B = b * hi0;
    g.from_min = B < A;
    T s = to_fp16((g.from_min ? A : -B) / m);
    if (hd::abs(s) < T(sh.thr)) {
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
AR_HD void store_qdq(T* p, T v) { *p = v; }
AR_HD inline void store_qdq(uint16_t* p, float v) { *p = f32_to_bf16(v); }

// One weight's QDQ value at its group's scale: q = clamp(round(w/s + v) + z), w^ = s (q - z).
template <class T>
AR_HD T qdq_value(const QdqShape& sh, const GroupScale<T>& g, T w, T v) {
  const T lo_q = T(sh.qmin()), hi_q = T(sh.qmax());
  T q = round_half_even(w / g.s + v) + g.z;
  q = q < lo_q ? lo_q : q > hi_q ? hi_q : q;
  return T(g.s * (q - g.z));
}

// Forward over rows [r0, r1). V, alpha, beta may be null (0, 1, 1). scale/zero (optional) get the
// per-group values, for packing. Out = T, or uint16_t (bf16) with T = float.
template <class T, class Out = T>
void qdq_fwd(const QdqShape& sh, const T* W, const T* V, const T* alpha, const T* beta, const T* wmin0,
             const T* wmax0, Out* What, T* scale, T* zero, int64_t r0, int64_t r1) {
  const int64_t ng = sh.groups(), vw = ng * sh.group;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t gi = 0; gi < ng; ++gi) {
      const int64_t k = r * ng + gi;
      T a = alpha ? clamp01(alpha[k]) : T(1), b = beta ? clamp01(beta[k]) : T(1);
      GroupScale<T> g = group_scale(sh, a, b, wmin0[k], wmax0[k]);
      if (scale) scale[k] = g.s;
      if (zero) zero[k] = g.z;
      for (int64_t c = gi * sh.group; c < std::min(sh.in, (gi + 1) * sh.group); ++c)
        store_qdq(What + r * sh.in + c, qdq_value(sh, g, W[r * sh.in + c], V ? V[r * vw + c] : T(0)));
    }
}

// The sums of a group's backward pass in one fixed order that the scalar and the 16-lane paths
// (qdq_bwd_simd.cpp) share: element c of a group (counted from the group's start) adds, by fma, into
// partial c mod 16; the 16 partials then combine pairwise (0+1, 2+3, ..., then pairs of pairs).
constexpr int kQdqLanes = 16;

template <class T>
AR_HD T combine_lanes(T* p) {
  for (int w = 1; w < kQdqLanes; w *= 2)
    for (int i = 0; i < kQdqLanes; i += 2 * w) p[i] += p[i + w];
  return p[0];
}

// dalpha, dbeta of group k from its sums ds = dL/ds and dz = dL/dz (straight-through estimator).
template <class T>
AR_HD void group_grads(const QdqShape& sh, const GroupScale<T>& g, T ar, T br, T a, T lo0, T hi0, T ds, T dz,
                       T* dalpha, T* dbeta) {
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

// One element's part of its group's backward (straight-through):
//   w^ = s (q - z), q = clamp(round(w/s + v) + z): dV = in ? d s : 0, ds += d ((q - z) - (in ? w/s : 0)),
//   dz -= (in ? 0 : d s); `in`: q was not clamped.
template <class T>
struct ElemGrad {
  T dv = 0, t = 0;
  bool in = true;
};

template <class T>
AR_HD ElemGrad<T> qdq_elem_grad(const QdqShape& sh, const GroupScale<T>& g, T w, T v, T d) {
  const T lo_q = T(sh.qmin()), hi_q = T(sh.qmax());
  const T ws = w / g.s;
  const T rq = round_half_even(ws + v) + g.z;
  ElemGrad<T> e;
  e.in = rq >= lo_q && rq <= hi_q;
  const T q = e.in ? rq : (rq < lo_q ? lo_q : hi_q);
  e.dv = e.in ? d * g.s : T(0);
  e.t = (q - g.z) + (e.in ? -ws : T(0));
  return e;
}

// Adds an element's terms to its lane's partial sums of ds and dz (by fma, in the order above).
template <class T>
AR_HD void add_elem_grad(const ElemGrad<T>& e, T d, T s, T& ps, T& pz) {
  ps = hd::fma(d, e.t, ps);
  if (!e.in) pz = hd::fma(-d, s, pz);
}

// Backward of one group over its `len` columns: dV (if wanted), and the sums ds, dz in the lane order
// above (the CUDA kernel, kernels/cuda/qdq_int.cu, runs one thread per lane in the same order).
template <class T>
void group_bwd(const QdqShape& sh, const GroupScale<T>& g, const T* W, const T* V, const T* dWhat, T* dV, int64_t len,
               T& ds, T& dz) {
  T ps[kQdqLanes] = {}, pz[kQdqLanes] = {};
  for (int64_t c = 0; c < len; ++c) {
    const T d = dWhat[c];
    const ElemGrad<T> e = qdq_elem_grad(sh, g, W[c], V ? V[c] : T(0), d);
    if (dV) dV[c] = e.dv;
    const int j = int(c % kQdqLanes);
    add_elem_grad(e, d, g.s, ps[j], pz[j]);
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
