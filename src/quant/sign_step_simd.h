// SignRound's step over a CPU array at a given ISA level's path (sign_step_simd.cpp): the same bits as
// quant/sign_step.h's scalar forms on every level.
#pragma once
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace ar::quant {

// p[i] -= rate * sign(d[i]) for i < n, then clamped to [0, 1] when `coef` (the min/max coefficients).
// Returns false if some d[i] was not finite (its p[i] is left as the step leaves it: unchanged for NaN).
bool sign_step_array(float* p, const float* d, int64_t n, float rate, bool coef, cpu::Isa isa);

}  // namespace ar::quant
