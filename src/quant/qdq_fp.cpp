// Built with -ffp-contract=off (src/quant/CMakeLists.txt): each operation rounds where torch rounds it.
#include "quant/qdq_fp.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/small_float.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa.h"

namespace ar::quant {
namespace {

constexpr float kFp8MinScale = float(1.0 / (448.0 * 512.0));  // vLLM's floor, as fp8.py has it
constexpr float kSixth = float(1.0 / 6.0);                     // get_reciprocal(6.0) as torch applies it

float elem_round(FpElem e, float x) { return e == FpElem::E2M1 ? e2m1_round(x) : e4m3_round(x); }

// floor / ceil of log2(x) for x > 0, from the binary exponent (exact).
int floor_log2(float x) {
  int ex = 0;
  const float m = std::frexp(x, &ex);  // x = m 2^ex, m in [0.5, 1)
  (void)m;
  return ex - 1;
}
int ceil_log2(float x) {
  int ex = 0;
  const float m = std::frexp(x, &ex);
  return m == 0.5f ? ex - 1 : ex;
}

// ceil(log2(M / d)) for M > 0, d >= 1. A quotient below FLT_MIN would be flushed to 0 under the
// engine's flush-to-zero mode (core/float_mode.h); scaled by 2^64 first it stays normal, and the
// exponent is the same wherever the unscaled quotient was normal too.
int ceil_log2_quotient(float M, float d) {
  constexpr float kTwo64 = 18446744073709551616.0f;
  return M < 1.0f ? ceil_log2(M * kTwo64 / d) - 64 : ceil_log2(M / d);
}

struct Span {
  int64_t r0, r1, c0, c1;
};
Span tile_span(const FpQdqShape& sh, int64_t t) {
  const int64_t tr = t / sh.tiles_across(), tc = t % sh.tiles_across();
  return {tr * sh.tile_rows, std::min(sh.out, (tr + 1) * sh.tile_rows), tc * sh.tile_cols,
          std::min(sh.in, (tc + 1) * sh.tile_cols)};
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

TileScale tile_scale(const FpQdqShape& sh, float amax, float c) {
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
      e = std::clamp(e, -127, 127);
      ts.div = ts.out = pow2f(e);  // 2^-127 is subnormal: from bits (core/small_float.h)
      ts.reported = float(e);
      break;
    }
    case FpFamily::Nvfp4: {
      const float G = sh.global_scale;
      const float S0 = G * (ts.M * kSixth);
      ts.S = e4m3_round(std::clamp(S0, -kE4M3Max, kE4M3Max));
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
      ts.div = ts.out = std::max(s0, kFp8MinScale);
      ts.reported = ts.div;
      ts.passes = s0 > kFp8MinScale;
      break;
    }
  }
  return ts;
}

float coeff(const float* beta, const float* init, int64_t t) {
  const float b = beta ? beta[t] : 1.0f, i = init ? init[t] : 1.0f;
  return i * b;  // init_scale * max_scale, in AutoRound's order
}

// dbeta of a tile from the sums over its elements: gq = sum dw^ q, gw = sum du w (in double: the two
// terms of the scale's gradient nearly cancel).
float beta_grad(const FpQdqShape& sh, const TileScale& ts, float amax, float init, double gq, double gw) {
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

}  // namespace

FpQdqShape make_fp_qdq_shape(FpFamily family, FpElem elem, int64_t out, int64_t in, int64_t group_size,
                             int64_t block_rows) {
  if (out <= 0 || in <= 0)
    fail(ErrorKind::InvalidInput, "weight shape [" + std::to_string(out) + ", " + std::to_string(in) + "] is empty");
  if (family == FpFamily::Nvfp4 && elem != FpElem::E2M1)
    fail(ErrorKind::InvalidInput, "NVFP4 has E2M1 elements only");
  if (family == FpFamily::Fp8 && elem != FpElem::E4M3) fail(ErrorKind::InvalidInput, "FP8 has E4M3 elements only");
  if (group_size < -1 || (group_size == 0 && block_rows > 0) || block_rows < 0)
    fail(ErrorKind::InvalidInput, "group size " + std::to_string(group_size) + " (block rows " +
                                      std::to_string(block_rows) + ") is not a tile AutoRound has");
  FpQdqShape sh;
  sh.family = family;
  sh.elem = elem;
  sh.out = out;
  sh.in = in;
  if (group_size == 0) {
    sh.tile_rows = out;
    sh.tile_cols = in;
  } else if (block_rows > 0) {
    sh.tile_rows = block_rows;
    sh.tile_cols = group_size;
  } else {
    sh.tile_rows = 1;
    sh.tile_cols = group_size == -1 || in < group_size ? in : group_size;
  }
  return sh;
}

float nvfp4_global_scale(const float* W, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(W[i]));
  return m == 0.0f ? 0.0f : kE4M3Max * kE2M1Max * (1.0f / m);  // FLOAT8_E4M3_MAX * 6 * get_reciprocal(max)
}

void fp_qdq_amax(const FpQdqShape& sh, const float* W, float* amax) {
  for (int64_t t = 0; t < sh.tiles(); ++t) {
    const Span s = tile_span(sh, t);
    float m = 0;
    for (int64_t r = s.r0; r < s.r1; ++r)
      for (int64_t c = s.c0; c < s.c1; ++c) m = std::max(m, std::fabs(W[r * sh.in + c]));
    amax[t] = m;
  }
}

namespace {
// One tile's rows of the forward, with the family and element known at compile time.
template <FpFamily F, FpElem E, bool HasV>
void fwd_rows(const FpQdqShape& sh, const TileScale& ts, const Span& s, const float* W, const float* V, int64_t vw,
              float* What) {
  constexpr float mn = E == FpElem::E2M1 ? 6.0f : 448.0f;
  const float mul = ts.mul, div = ts.div, out = ts.out;
  for (int64_t r = s.r0; r < s.r1; ++r) {
    const float* w = W + r * sh.in;
    const float* v = HasV ? V + r * vw : nullptr;
    float* o = What + r * sh.in;
    for (int64_t c = s.c0; c < s.c1; ++c) {
      const float u = (F == FpFamily::Nvfp4 ? w[c] * mul : w[c] / div) + (HasV ? v[c] : 0.0f);
      const float cl = std::min(std::max(u, -mn), mn);
      o[c] = (E == FpElem::E2M1 ? e2m1_round_finite(cl) : e4m3_round_finite(cl)) * out;
    }
  }
}

template <FpFamily F, FpElem E>
void fwd_tiles(const FpQdqShape& sh, const float* W, const float* V, const float* beta, const float* init,
               const float* amax, float* What, float* scale) {
  const int64_t vw = sh.padded_in();
  for (int64_t t = 0; t < sh.tiles(); ++t) {
    const TileScale ts = tile_scale(sh, amax[t], coeff(beta, init, t));
    if (scale) scale[t] = ts.reported;
    if (V) fwd_rows<F, E, true>(sh, ts, tile_span(sh, t), W, V, vw, What);
    else fwd_rows<F, E, false>(sh, ts, tile_span(sh, t), W, V, vw, What);
  }
}
}  // namespace

void fp_qdq_fwd(const FpQdqShape& sh, const float* W, const float* V, const float* beta, const float* init,
                const float* amax, float* What, float* scale) {
  using F = FpFamily;
  constexpr FpElem e2m1 = FpElem::E2M1, e4m3 = FpElem::E4M3;
  const bool small = sh.elem == e2m1;
  switch (sh.family) {
    case F::Mx:
      return small ? fwd_tiles<F::Mx, e2m1>(sh, W, V, beta, init, amax, What, scale)
                   : fwd_tiles<F::Mx, e4m3>(sh, W, V, beta, init, amax, What, scale);
    case F::MxRceil:
      return small ? fwd_tiles<F::MxRceil, e2m1>(sh, W, V, beta, init, amax, What, scale)
                   : fwd_tiles<F::MxRceil, e4m3>(sh, W, V, beta, init, amax, What, scale);
    case F::Nvfp4: return fwd_tiles<F::Nvfp4, e2m1>(sh, W, V, beta, init, amax, What, scale);
    case F::Fp8: return fwd_tiles<F::Fp8, e4m3>(sh, W, V, beta, init, amax, What, scale);
  }
}

namespace {
// One row of a tile's backward, vectorized: each element's rounded value q and du = dL/du, where
// d round(clamp(u)) / du for |u| < max_norm (see the header) is: FP8 1; NVFP4 1, and 0 where u = 0 or
// q = +-max_norm (torch's clamp passes no gradient at its bounds, and quant_element / cast_to_fp4
// clamp again after rounding); MX the same zeros, else q / u where |u| >= 2^(emin + 1) (the private
// exponent floor(log2|u|) is clipped below at emin; above it, its STE passes) and 1 below. Every
// operand is computed and then selected (no branch per element).
template <FpFamily F, FpElem E, bool HasV>
void bwd_row(const TileScale& ts, int64_t n, const float* w, const float* v, const float* g, float* q, float* du) {
  constexpr float mn = E == FpElem::E2M1 ? 6.0f : 448.0f;
  constexpr float lim = E == FpElem::E2M1 ? 2.0f : 0x1p-5f;  // 2^(emin + 1)
  const float mul = ts.mul, div = ts.div, out = ts.out;
  for (int64_t c = 0; c < n; ++c) {
    const float u = (F == FpFamily::Nvfp4 ? w[c] * mul : w[c] / div) + (HasV ? v[c] : 0.0f);
    const float cl = std::min(std::max(u, -mn), mn);
    const float qc = E == FpElem::E2M1 ? e2m1_round_finite(cl) : e4m3_round_finite(cl);
    const bool none = (u == 0.0f) | (std::fabs(qc) == mn);
    const float ratio = qc / (u == 0.0f ? 1.0f : u);
    const float mx = std::fabs(u) >= lim ? ratio : 1.0f;
    const float rg = F == FpFamily::Fp8 ? 1.0f : none ? 0.0f : F == FpFamily::Nvfp4 ? 1.0f : mx;
    const float d = g[c] * out * rg;
    q[c] = qc;
    du[c] = ((u > -mn) & (u < mn)) ? d : 0.0f;
  }
}

template <FpFamily F, FpElem E>
void bwd_tiles(const FpQdqShape& sh, const float* W, const float* V, const float* beta, const float* init,
               const float* amax, const float* dWhat, float* dV, float* dbeta) {
  const int64_t vw = sh.padded_in();
  std::vector<float> q(size_t(sh.tile_cols)), du(size_t(sh.tile_cols));
  for (int64_t t = 0; t < sh.tiles(); ++t) {
    const TileScale ts = tile_scale(sh, amax[t], coeff(beta, init, t));
    const Span s = tile_span(sh, t);
    const int64_t n = s.c1 - s.c0;
    double gq = 0, gw = 0;
    for (int64_t r = s.r0; r < s.r1; ++r) {
      const float *w = W + r * sh.in + s.c0, *g = dWhat + r * sh.in + s.c0;
      if (V) bwd_row<F, E, true>(ts, n, w, V + r * vw + s.c0, g, q.data(), du.data());
      else bwd_row<F, E, false>(ts, n, w, nullptr, g, q.data(), du.data());
      if (dV) std::copy_n(du.data(), n, dV + r * vw + s.c0);
      for (int64_t c = 0; c < n; ++c) {  // the scale's sums in element order, in double
        gq += double(g[c]) * q[size_t(c)];
        gw += double(du[size_t(c)]) * w[c];
      }
    }
    if (dbeta) dbeta[t] = beta_grad(sh, ts, amax[t], init ? init[t] : 1.0f, gq, gw);
  }
}
}  // namespace

void fp_qdq_bwd(const FpQdqShape& sh, const float* W, const float* V, const float* beta, const float* init,
                const float* amax, const float* dWhat, float* dV, float* dbeta) {
  using F = FpFamily;
  constexpr FpElem e2m1 = FpElem::E2M1, e4m3 = FpElem::E4M3;
  const bool small = sh.elem == e2m1;
  switch (sh.family) {
    case F::Mx:
      return small ? bwd_tiles<F::Mx, e2m1>(sh, W, V, beta, init, amax, dWhat, dV, dbeta)
                   : bwd_tiles<F::Mx, e4m3>(sh, W, V, beta, init, amax, dWhat, dV, dbeta);
    case F::MxRceil:
      return small ? bwd_tiles<F::MxRceil, e2m1>(sh, W, V, beta, init, amax, dWhat, dV, dbeta)
                   : bwd_tiles<F::MxRceil, e4m3>(sh, W, V, beta, init, amax, dWhat, dV, dbeta);
    case F::Nvfp4: return bwd_tiles<F::Nvfp4, e2m1>(sh, W, V, beta, init, amax, dWhat, dV, dbeta);
    case F::Fp8: return bwd_tiles<F::Fp8, e4m3>(sh, W, V, beta, init, amax, dWhat, dV, dbeta);
  }
}

FpQdqShape fp_qdq_tile_rows(const FpQdqShape& sh, int64_t t0, int64_t t1) {
  FpQdqShape part = sh;
  part.out = std::min(sh.out, t1 * sh.tile_rows) - t0 * sh.tile_rows;
  return part;
}

void fp_qdq_fwd(Context& ctx, const FpQdqShape& sh, const float* W, const float* V, const float* beta,
                const float* init, const float* amax, float* What, uint16_t* What16, float* scale) {
  const int64_t across = sh.tiles_across(), vw = sh.padded_in();
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, sh.tile_rows * sh.in));
  ctx.pool().parallel_for(sh.tiles_down(), [&](int64_t t0, int64_t t1) {
    const FpQdqShape part = fp_qdq_tile_rows(sh, t0, t1);
    const int64_t r0 = t0 * sh.tile_rows, k = t0 * across;
    Tensor tmp = What16 ? Tensor::empty({part.out * sh.in}, DType::F32, ctx) : Tensor();
    float* out = What16 ? tmp.f32() : What + r0 * sh.in;
    fp_qdq_fwd(part, W + r0 * sh.in, V ? V + r0 * vw : nullptr, beta ? beta + k : nullptr, init ? init + k : nullptr,
               amax + k, out, scale ? scale + k : nullptr);
    if (What16) cpu::fp32_to_bf16_serial(out, What16 + r0 * sh.in, part.out * sh.in, cpu::kernel_isa());
  }, grain);
}

void fp_qdq_elements(const FpQdqShape& sh, const float* What, const float* scale, float* elems) {
  for (int64_t t = 0; t < sh.tiles(); ++t) {
    // The step of the forward's tile (tile_scale's arithmetic, from the reported scale).
    float mul = 0, div = 1;
    if (sh.family == FpFamily::Nvfp4) {
      const float inv_g = sh.global_scale == 0.0f ? 0.0f : 1.0f / sh.global_scale;
      const float d = scale[t] * inv_g;
      mul = d == 0.0f ? 0.0f : 1.0f / d;
    } else {
      div = sh.family == FpFamily::Fp8 ? scale[t] : pow2f(int(scale[t]));
    }
    const Span s = tile_span(sh, t);
    for (int64_t r = s.r0; r < s.r1; ++r)
      for (int64_t c = s.c0; c < s.c1; ++c) {
        const float w = What[r * sh.in + c];
        elems[r * sh.in + c] = elem_round(sh.elem, sh.family == FpFamily::Nvfp4 ? w * mul : w / div);
      }
  }
}

}  // namespace ar::quant
