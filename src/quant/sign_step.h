// SignRound's update of one tunable, shared by the CPU step (quant/linear_family.cpp) and the CUDA one
// (kernels/cuda/sign_step.cu): p -= rate * sign(d), and for the min/max coefficients a clamp to [0, 1]
// afterwards (AutoRound clamps min_scale / max_scale in place before every forward, so the gradient is
// always taken at a value inside; a coefficient stepped past 1 comes back next time). sign(0) = 0, and
// a NaN gradient leaves p unchanged (the caller reports it as not finite).
#pragma once
#include "core/hd.h"

namespace ar::quant {

AR_HD inline float sign_of(float d) { return float((d > 0.f) - (d < 0.f)); }

AR_HD inline float sign_step_value(float p, float d, float rate) { return p - rate * sign_of(d); }

AR_HD inline float clamp_coef(float p) { return p < 0.f ? 0.f : p > 1.f ? 1.f : p; }

AR_HD inline float coef_step_value(float p, float d, float rate) { return clamp_coef(sign_step_value(p, d, rate)); }

}  // namespace ar::quant
