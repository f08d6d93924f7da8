// The integer weight QDQ of quant/qdq_ref.h on the device (every pointer a device pointer): the forward
// (What in fp32, or in bf16 for the --amp GEMM operand; scale / zero per group, optional) and the
// straight-through backward (dV, dalpha, dbeta, each optional). Each element runs qdq_ref.h's own AR_HD
// arithmetic, and a group's sums run its lane order (one thread per lane, partial j over the elements
// c = j mod 16, then the pairwise combination), so the results equal the CPU's bit for bit.
#pragma once
#include <cstdint>

#include "kernels/cuda/device.h"
#include "quant/qdq_ref.h"

namespace ar::cuda {

void qdq_fwd(DeviceContext& ctx, const quant::QdqShape& sh, const float* W, const float* V, const float* alpha,
             const float* beta, const float* wmin0, const float* wmax0, float* What, uint16_t* What16, float* scale,
             float* zero);

void qdq_bwd(DeviceContext& ctx, const quant::QdqShape& sh, const float* W, const float* V, const float* alpha,
             const float* beta, const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha,
             float* dbeta);

}  // namespace ar::cuda
