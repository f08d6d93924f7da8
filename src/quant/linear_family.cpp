#include "quant/linear_family.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/opt_rtn.h"
#include "quant/opt_rtn_fp.h"
#include "quant/sign_step_simd.h"

namespace ar::quant {

namespace {

// p -= rate * sign(d) over n entries (quant/sign_step.h); false if a d was not finite.
bool sign_step(float* p, const float* d, int64_t n, float rate) {
  return sign_step_array(p, d, n, rate, false, cpu::kernel_isa());
}

// The same for a min/max coefficient, kept in [0, 1].
bool coef_step(float* p, const float* d, int64_t n, float rate) {
  return sign_step_array(p, d, n, rate, true, cpu::kernel_isa());
}

void copy_floats(Tensor& dst, const Tensor& src, int64_t at, int64_t n) {
  std::memcpy(dst.f32() + at, src.f32() + at, size_t(n) * 4);
}

constexpr int64_t kRows = 8;  // rows per block of a step: a block's gradients are applied while in cache

// Integers: V [out, groups * group], alpha / beta per group (qdq.h).
class IntFamily : public LinearFamily {
 public:
  void qdq(Context& ctx, TunedLinear& L, float* What, uint16_t* What16) const override {
    if (What16)
      return qdq_fwd(ctx, L.shape, L.weight->f32(), L.V.f32(), L.alpha.f32(), L.beta.f32(), L.wmin0.f32(),
                     L.wmax0.f32(), What16, L.scale.f32(), L.zero.f32());
    qdq_fwd(ctx, L.shape, L.weight->f32(), L.V.f32(), L.alpha.f32(), L.beta.f32(), L.wmin0.f32(), L.wmax0.f32(), What,
            L.scale.f32(), L.zero.f32());
  }
  int64_t step_units(const TunedLinear& L) const override { return L.shape.out; }
  int64_t step_grain(const TunedLinear& L) const override {
    return std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, L.shape.groups() * L.shape.group));
  }
  bool step(TunedLinear& L, const float* dW, int64_t c0, int64_t c1, const StepRates& r,
            Tunables* save) const override {
    const QdqShape& sh = L.shape;
    const int64_t ng = sh.groups(), vw = ng * sh.group;
    std::vector<float> dV(size_t(kRows * vw)), da(size_t(kRows * ng)), db(da.size());
    bool ok = true;
    for (int64_t r0 = c0; r0 < c1; r0 += kRows) {
      const int64_t rows = std::min(kRows, c1 - r0), k = r0 * ng;
      if (save) {
        copy_floats(save->V, L.V, r0 * vw, rows * vw);
        copy_floats(save->alpha, L.alpha, k, rows * ng);
        copy_floats(save->beta, L.beta, k, rows * ng);
      }
      std::fill(dV.begin(), dV.end(), 0.f);  // zero in V's padding
      // Rows r0.. as a matrix of their own (every array advanced to row r0).
      qdq_bwd_rows(sh, L.weight->f32() + r0 * sh.in, L.V.f32() + r0 * vw, L.alpha.f32() + k, L.beta.f32() + k,
                   L.wmin0.f32() + k, L.wmax0.f32() + k, dW + r0 * sh.in, dV.data(), r.minmax ? da.data() : nullptr,
                   r.minmax ? db.data() : nullptr, 0, rows);
      ok &= sign_step(L.V.f32() + r0 * vw, dV.data(), rows * vw, r.lr);
      if (!r.minmax) continue;
      ok &= coef_step(L.alpha.f32() + k, da.data(), rows * ng, r.mm_lr);
      ok &= coef_step(L.beta.f32() + k, db.data(), rows * ng, r.mm_lr);
    }
    return ok;
  }
  void search(Context& ctx, TunedLinear& L, const float* imatrix, float* What) const override {
    const float* W = L.weight->f32();
    if (imatrix) return opt_rtn_sym(ctx, L.shape, W, imatrix, What, L.scale.f32());
    // Plain RTN: the QDQ at V = 0, alpha = beta = 1 (what SignRound starts from).
    Tensor lo = Tensor::empty({L.scale.numel()}, DType::F32, ctx), hi = Tensor::empty({L.scale.numel()}, DType::F32, ctx);
    qdq_minmax(ctx, L.shape, W, lo.f32(), hi.f32());
    qdq_fwd(ctx, L.shape, W, nullptr, nullptr, nullptr, lo.f32(), hi.f32(), What, L.scale.f32(), L.zero.f32());
  }
};

// GGUF: per-group scale and offset fixed before tuning (in scale / zero); only V [out, in] moves.
class FixedFamily : public LinearFamily {
 public:
  void qdq(Context& ctx, TunedLinear& L, float* What, uint16_t* What16) const override {
    if (What16)
      return qdq_fixed_fwd(ctx, *L.fixed, L.weight->f32(), L.V.f32(), L.scale.f32(), L.zero.f32(), What16);
    qdq_fixed_fwd(ctx, *L.fixed, L.weight->f32(), L.V.f32(), L.scale.f32(), L.zero.f32(), What);
  }
  int64_t step_units(const TunedLinear& L) const override { return L.fixed->out; }
  int64_t step_grain(const TunedLinear& L) const override {
    return std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, L.fixed->in));
  }
  bool step(TunedLinear& L, const float* dW, int64_t c0, int64_t c1, const StepRates& r,
            Tunables* save) const override {
    const FixedQdq& f = *L.fixed;
    std::vector<float> dV(size_t(kRows * f.in));
    bool ok = true;
    for (int64_t r0 = c0; r0 < c1; r0 += kRows) {
      const int64_t rows = std::min(kRows, c1 - r0), k = r0 * f.groups();
      if (save) copy_floats(save->V, L.V, r0 * f.in, rows * f.in);
      FixedQdq part = f;
      part.out = rows;
      qdq_fixed_bwd<float>(part, L.weight->f32() + r0 * f.in, L.V.f32() + r0 * f.in, L.scale.f32() + k,
                           L.zero.f32() + k, dW + r0 * f.in, dV.data(), 0, rows);
      ok &= sign_step(L.V.f32() + r0 * f.in, dV.data(), rows * f.in, r.lr);
    }
    return ok;
  }
  void search(Context&, TunedLinear& L, const float*, float*) const override {
    fail(ErrorKind::Internal, L.name + ": the GGUF search runs in its track, not through the family");
  }
};

// Floating point: V [out, padded_in] and beta (the max-scale coefficient) per tile; alpha unused.
class FloatFamily : public LinearFamily {
 public:
  void qdq(Context& ctx, TunedLinear& L, float* What, uint16_t* What16) const override {
    fp_qdq_fwd(ctx, *L.fp, L.weight->f32(), L.V.f32(), L.beta.f32(), L.wmin0.f32(), L.wmax0.f32(), What, What16,
               L.scale.f32());
  }
  int64_t step_units(const TunedLinear& L) const override { return L.fp->tiles_down(); }
  int64_t step_grain(const TunedLinear& L) const override {
    return std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, L.fp->tile_rows * L.fp->padded_in()));
  }
  // In blocks of tile rows: a tile's beta gradient sums over the whole tile.
  bool step(TunedLinear& L, const float* dW, int64_t t0, int64_t t1, const StepRates& r,
            Tunables* save) const override {
    const FpQdqShape& sh = *L.fp;
    const int64_t across = sh.tiles_across(), vw = sh.padded_in();
    const FpQdqShape part = fp_qdq_tile_rows(sh, t0, t1);
    const int64_t r0 = t0 * sh.tile_rows, k = t0 * across, nt = part.tiles();
    if (save) {
      copy_floats(save->V, L.V, r0 * vw, part.out * vw);
      copy_floats(save->beta, L.beta, k, nt);
    }
    std::vector<float> dV(static_cast<size_t>(part.out * vw), 0.f), db(static_cast<size_t>(nt));
    fp_qdq_bwd(part, L.weight->f32() + r0 * sh.in, L.V.f32() + r0 * vw, L.beta.f32() + k, L.wmin0.f32() + k,
               L.wmax0.f32() + k, dW + r0 * sh.in, dV.data(), r.minmax ? db.data() : nullptr);
    bool ok = sign_step(L.V.f32() + r0 * vw, dV.data(), part.out * vw, r.lr);
    if (r.minmax) ok &= coef_step(L.beta.f32() + k, db.data(), nt, r.mm_lr);
    return ok;
  }
  // The search's coefficient per tile (AutoRound's opt-RTN) with an imatrix, else 1; V = 0.
  void search(Context& ctx, TunedLinear& L, const float* imatrix, float* What) const override {
    if (imatrix) fp_opt_rtn_init(ctx, *L.fp, L.weight->f32(), imatrix, L.wmin0.f32());
    qdq(ctx, L, What, nullptr);
  }
};

const IntFamily kInt;
const FixedFamily kFixed;
const FloatFamily kFloat;

}  // namespace

const LinearFamily& family(const TunedLinear& L) {
  if (L.fixed) return kFixed;
  if (L.fp) return kFloat;
  return kInt;
}

Tunables snapshot(Context& ctx, const TunedLinear& L) {
  return {L.V.clone(ctx), L.alpha.clone(ctx), L.beta.clone(ctx), L.act_coef};
}

void restore(TunedLinear& L, const Tunables& t) {
  for (auto [dst, src] : {std::pair{&L.V, &t.V}, {&L.alpha, &t.alpha}, {&L.beta, &t.beta}})
    std::memcpy(dst->raw(), src->raw(), src->nbytes());
  L.act_coef = t.act_coef;
}

bool step_linear(Context& ctx, TunedLinear& L, const float* dW, const StepRates& r, Tunables* save) {
  const LinearFamily& f = family(L);
  std::atomic<bool> ok{true};
  ctx.pool().parallel_for(f.step_units(L), [&](int64_t u0, int64_t u1) {
    if (!f.step(L, dW, u0, u1, r, save)) ok = false;
  }, f.step_grain(L));
  return ok;
}

}  // namespace ar::quant
