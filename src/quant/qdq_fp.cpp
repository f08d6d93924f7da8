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

using fp_elem::Span;
using fp_elem::TileScale;
using fp_elem::beta_grad;
using fp_elem::coeff;
using fp_elem::tile_scale;
using fp_elem::tile_span;

float elem_round(FpElem e, float x) { return e == FpElem::E2M1 ? e2m1_round(x) : e4m3_round(x); }

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
  for (int64_t r = s.r0; r < s.r1; ++r) {
    const float* w = W + r * sh.in;
    const float* v = HasV ? V + r * vw : nullptr;
    float* o = What + r * sh.in;
    for (int64_t c = s.c0; c < s.c1; ++c) o[c] = fp_elem::qdq<F, E>(ts, w[c], HasV ? v[c] : 0.0f);
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
// One row of a tile's backward, vectorized: each element's rounded value q and du (fp_elem::grad).
template <FpFamily F, FpElem E, bool HasV>
void bwd_row(const TileScale& ts, int64_t n, const float* w, const float* v, const float* g, float* q, float* du) {
  for (int64_t c = 0; c < n; ++c) fp_elem::grad<F, E>(ts, w[c], HasV ? v[c] : 0.0f, g[c], q[c], du[c]);
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
