// SignRound's step of one tunable array on the device: p -= rate * sign(d) (quant/sign_step.h's AR_HD
// arithmetic, so the bits equal the CPU step's), the min/max coefficients then kept in [0, 1]. `save`
// (optional) first receives p (the best iterate's snapshot); `nonfinite` (a device int, optional) is
// set to 1 if any d is not finite (the step is still taken, as on the CPU).
#pragma once
#include <cstdint>

#include "kernels/cuda/device.h"

namespace ar::cuda {

void sign_step(DeviceContext& ctx, float* p, const float* d, int64_t n, float rate, bool coef, float* save,
               int* nonfinite);

}  // namespace ar::cuda
