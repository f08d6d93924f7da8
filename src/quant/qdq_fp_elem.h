// The float schemes' QDQ per tile and per element (the formulas: quant/qdq_fp.h), AR_HD: the CPU's loops
// (quant/qdq_fp.cpp, built with -ffp-contract=off) and the CUDA kernels (kernels/cuda/qdq_fp.cu, built with
// --fmad=false) run this one source, so both round every product and quotient where AutoRound does and
// give the same bits.
#pragma once
#include <cstdint>

#include "core/hd.h"
#include "core/small_float.h"

namespace ar::quant {

enum class FpFamily : uint8_t { Mx, MxRceil, Nvfp4, Fp8 };
enum class FpElem : uint8_t { E2M1, E4M3 };

struct FpQdqShape {
  FpFamily family = FpFamily::Mx;
  FpElem elem = FpElem::E2M1;
  int64_t out = 0, in = 0;
  int64_t tile_rows = 1, tile_cols = 32;  // one scale per tile_rows x tile_cols (zero-padded at the edges)
  float global_scale = 0;                 // NVFP4's G
  AR_HD int64_t tiles_down() const { return (out + tile_rows - 1) / tile_rows; }
  AR_HD int64_t tiles_across() const { return (in + tile_cols - 1) / tile_cols; }
  AR_HD int64_t tiles() const { return tiles_down() * tiles_across(); }
  AR_HD int64_t padded_in() const { return tiles_across() * tile_cols; }
  AR_HD float max_norm() const { return elem == FpElem::E2M1 ? 6.0f : 448.0f; }
  AR_HD int emax() const { return elem == FpElem::E2M1 ? 2 : 8; }   // the MX element's largest exponent
  AR_HD int emin() const { return elem == FpElem::E2M1 ? 0 : -6; }  // its smallest normal exponent
};

namespace fp_elem {

constexpr float kFp8MinScale = float(1.0 / (448.0 * 512.0));  // vLLM's floor, as fp8.py has it
constexpr float kSixth = float(1.0 / 6.0);                     // get_reciprocal(6.0) as torch applies it

// floor / ceil of log2(x) for x > 0, from the binary exponent (exact).
AR_HD inline int floor_log2(float x) {
  int ex = 0;
  hd::frexp(x, &ex);  // x = m 2^ex, m in [0.5, 1)
  return ex - 1;
}
AR_HD inline int ceil_log2(float x) {
  int ex = 0;
  const float m = hd::frexp(x, &ex);
  return m == 0.5f ? ex - 1 : ex;
}

// ceil(log2(M / d)) for M > 0, d >= 1. A quotient below FLT_MIN would be flushed to 0 under the
// engine's flush-to-zero mode (core/float_mode.h); scaled by 2^64 first it stays normal, and the
// exponent is the same wherever the unscaled quotient was normal too.
AR_HD inline int ceil_log2_quotient(float M, float d) {
  constexpr float kTwo64 = 18446744073709551616.0f;
  return M < 1.0f ? ceil_log2(M * kTwo64 / d) - 64 : ceil_log2(M / d);
}

struct Span {
  int64_t r0, r1, c0, c1;
};
AR_HD inline Span tile_span(const FpQdqShape& sh, int64_t t) {
  const int64_t tr = t / sh.tiles_across(), tc = t % sh.tiles_across();
  const int64_t r1 = (tr + 1) * sh.tile_rows, c1 = (tc + 1) * sh.tile_cols;
  return {tr * sh.tile_rows, r1 < sh.out ? r1 : sh.out, tc * sh.tile_cols, c1 < sh.in ? c1 : sh.in};
}

// One tile's scale, and what its backward needs. The element map is
//   u = w / div + V (MX, FP8) or w * mul + V (NVFP4);  w^ = round(clamp(u)) * out.
struct TileScale {
  float div = 1, mul = 1, out = 1;
  float reported = 0;     // MX: E; NVFP4: S; FP8: s
  float M = 0;            // max|w| * c
  bool passes = false;    // does dbeta get a gradient through this scale?
  float S = 0, d = 0;     // NVFP4: the block scale and S / G
};

AR_HD inline TileScale tile_scale(const FpQdqShape& sh, float amax, float c) {
  TileScale ts;
  ts.M = amax * c;
  switch (sh.family) {
    case FpFamily::Mx:
    case FpFamily::MxRceil: {
      int e = 1;  // AutoRound's where(M == 0, 1, ...)
      if (ts.M != 0.0f)
        e = sh.family == FpFamily::Mx ? floor_log2(ts.M) - sh.emax() : ceil_log2_quotient(ts.M, sh.max_norm());
      else if (sh.family == FpFamily::Mx)
        e = 1 - sh.emax();
      ts.passes = ts.M != 0.0f && e > -127 && e < 127;  // torch's clamp: no gradient at a bound
      e = e < -127 ? -127 : e > 127 ? 127 : e;
      ts.div = ts.out = pow2f(e);  // 2^-127 is subnormal: from bits (core/small_float.h)
      ts.reported = float(e);
      break;
    }
    case FpFamily::Nvfp4: {
      const float G = sh.global_scale;
      const float S0 = G * (ts.M * kSixth);
      ts.S = e4m3_round(S0 < -kE4M3Max ? -kE4M3Max : S0 > kE4M3Max ? kE4M3Max : S0);
      const float inv_g = G == 0.0f ? 0.0f : 1.0f / G;
      ts.d = ts.S * inv_g;
      ts.mul = ts.d == 0.0f ? 0.0f : 1.0f / ts.d;
      ts.out = ts.mul == 0.0f ? 0.0f : 1.0f / ts.mul;
      ts.reported = ts.S;
      ts.passes = ts.d != 0.0f && S0 > -kE4M3Max && S0 < kE4M3Max;
      break;
    }
    case FpFamily::Fp8: {
      const float s0 = ts.M / kE4M3Max;
      ts.div = ts.out = s0 < kFp8MinScale ? kFp8MinScale : s0;  // std::max's order
      ts.reported = ts.div;
      ts.passes = s0 > kFp8MinScale;
      break;
    }
  }
  return ts;
}

AR_HD inline float coeff(const float* beta, const float* init, int64_t t) {
  const float b = beta ? beta[t] : 1.0f, i = init ? init[t] : 1.0f;
  return i * b;  // init_scale * max_scale, in AutoRound's order
}

// dbeta of a tile from the sums over its elements: gq = sum dw^ q, gw = sum du w (in double: the two
// terms of the scale's gradient nearly cancel).
AR_HD inline float beta_grad(const FpQdqShape& sh, const TileScale& ts, float amax, float init, double gq, double gw) {
  if (!ts.passes) return 0.0f;
  double dM;
  if (sh.family == FpFamily::Nvfp4) {
    // w^ = q / os, u = w os + V: dos = gw - gq / os^2; os = 1/d; d = S / G; S = e4m3_ste(G M / 6).
    const double os = ts.mul, d = ts.d, G = sh.global_scale;
    const double dd = -(gw - gq / (os * os)) / (d * d);
    dM = dd / G * G * double(kSixth);
  } else {
    // w^ = q s, u = w / s + V: ds = gq - gw / s^2. FP8: s = M / 448. MX: s = 2^E with
    // E = floor_ste(log2 M) - emax (or ceil_ste(log2(M / max_norm))): dE = ds s ln2, dM = dE / (M ln2).
    const double s = ts.div, ds = gq - gw / (s * s);
    dM = sh.family == FpFamily::Fp8 ? ds / double(kE4M3Max) : ds * s / double(ts.M);
  }
  return float(dM * double(amax) * double(init));
}

// An element's forward with the family and element known at compile time: round(clamp(u)) * out.
template <FpFamily F, FpElem E>
AR_HD inline float qdq(const TileScale& ts, float w, float v) {
  constexpr float mn = E == FpElem::E2M1 ? 6.0f : 448.0f;
  const float u = (F == FpFamily::Nvfp4 ? w * ts.mul : w / ts.div) + v;
  const float cl = u < -mn ? -mn : u > mn ? mn : u;
  return (E == FpElem::E2M1 ? e2m1_round_finite(cl) : e4m3_round_finite(cl)) * ts.out;
}

// An element's backward: its rounded value q and du = dL/du, where d round(clamp(u)) / du for
// |u| < max_norm (see qdq_fp.h) is: FP8 1; NVFP4 1, and 0 where u = 0 or q = +-max_norm (torch's clamp
// passes no gradient at its bounds, and quant_element / cast_to_fp4 clamp again after rounding); MX the
// same zeros, else q / u where |u| >= 2^(emin + 1) (the private exponent floor(log2|u|) is clipped below at
// emin; above it, its STE passes) and 1 below. Every operand is computed and then selected (no branch), so
// the CPU's loops vectorize.
template <FpFamily F, FpElem E>
AR_HD inline void grad(const TileScale& ts, float w, float v, float g, float& q, float& du) {
  constexpr float mn = E == FpElem::E2M1 ? 6.0f : 448.0f;
  constexpr float lim = E == FpElem::E2M1 ? 2.0f : 0x1p-5f;  // 2^(emin + 1)
  const float u = (F == FpFamily::Nvfp4 ? w * ts.mul : w / ts.div) + v;
  const float cl = u < -mn ? -mn : u > mn ? mn : u;
  const float qc = E == FpElem::E2M1 ? e2m1_round_finite(cl) : e4m3_round_finite(cl);
  const bool none = (u == 0.0f) | (hd::fabs(qc) == mn);
  const float ratio = qc / (u == 0.0f ? 1.0f : u);
  const float mx = hd::fabs(u) >= lim ? ratio : 1.0f;
  const float rg = F == FpFamily::Fp8 ? 1.0f : none ? 0.0f : F == FpFamily::Nvfp4 ? 1.0f : mx;
  const float d = g * ts.out * rg;
  q = qc;
  du = ((u > -mn) & (u < mn)) ? d : 0.0f;
}

}  // namespace fp_elem
}  // namespace ar::quant
