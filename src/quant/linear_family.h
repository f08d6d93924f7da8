// The weight-scheme families of a tuned Linear behind one interface: integers (qdq.h: V, alpha, beta
// per group), GGUF's fixed scales (qdq_fixed.h: V only; set by the GGUF track's fix_params) and the
// floating-point schemes (qdq_fp.h: V and the max-scale coefficient per tile). Each family gives the
// QDQ forward at the Linear's tunables, the straight-through step of its tunables from dL/dW^ over
// units of output rows (so callers run it in chunks on a pool, the bits independent of the chunking),
// and the --iters 0 search. SignRound's block tuner, its lm_head tuner and the RTN pass call these and
// name no family; the writers (pipeline/outputs.h, float_export.h) pack what the family left in
// scale / zero.
#pragma once
#include <cstdint>

#include "quant/signround.h"

namespace ar::quant {

// One sign-SGD step's rates: V's, and the min/max coefficients' (tuned only with `minmax`).
struct StepRates {
  float lr = 0, mm_lr = 0;
  bool minmax = true;
};

// The tunables of a Linear at one iteration (the best-iterate snapshot).
struct Tunables {
  Tensor V, alpha, beta;
  float act_coef = 1;
};
Tunables snapshot(Context& ctx, const TunedLinear& L);
void restore(TunedLinear& L, const Tunables& t);

class LinearFamily {
 public:
  virtual ~LinearFamily() = default;
  // W^ = QDQ(W; tunables) into What (fp32) or What16 (bf16, the amp GEMM operand); scale / zero get
  // what the writers pack.
  virtual void qdq(Context& ctx, TunedLinear& L, float* What, uint16_t* What16) const = 0;
  // The step runs over units [u0, u1) of step_units(L); chunks of step_grain(L) units make ~32K
  // elements of work.
  virtual int64_t step_units(const TunedLinear& L) const = 0;
  virtual int64_t step_grain(const TunedLinear& L) const = 0;
  // The tunables' gradients from dW^ ([out, in], the whole Linear's) on those units, then
  // p -= rate * sign(dp) (coefficients kept in [0, 1]); `save` (non-null) first receives the units'
  // current tunables. False if a gradient was not finite (the step is still taken).
  virtual bool step(TunedLinear& L, const float* dW, int64_t u0, int64_t u1, const StepRates& r,
                    Tunables* save) const = 0;
  // --iters 0: the family's search of the weight `L.weight` into What (imatrix given: the optimized
  // RTN, else plain RTN at V = 0 and unit coefficients), scale / zero for the writers. GGUF searches in
  // its own track (pipeline/gguf_track.h) and refuses here.
  virtual void search(Context& ctx, TunedLinear& L, const float* imatrix, float* What) const = 0;
};

// The family of a Linear's tunables: fixed (GGUF) if set, else float if fp is set, else integer.
const LinearFamily& family(const TunedLinear& L);

// The step of all of L's units on ctx's pool; false if a gradient was not finite.
bool step_linear(Context& ctx, TunedLinear& L, const float* dW, const StepRates& r, Tunables* save);

}  // namespace ar::quant
