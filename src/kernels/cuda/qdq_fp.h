// The float schemes' weight QDQ (quant/qdq_fp.h: MXFP4/8, NVFP4, FP8) on the device, every pointer a device
// pointer: the forward (What in fp32, or in bf16 for the --amp GEMM operand; each tile's reported scale,
// optional) and the straight-through backward (dV of the real columns and dbeta per tile, each optional).
// Each element runs quant/qdq_fp_elem.h's AR_HD arithmetic, and a tile's two scale sums run in element
// order in double by one thread, as the CPU adds them, so the results equal the CPU's bit for bit. A tile
// belongs to one thread: tiles of more than kMaxDeviceFpTile elements (FP8 per tensor) are refused.
#pragma once
#include <cstdint>

#include "kernels/cuda/device.h"
#include "quant/qdq_fp_elem.h"

namespace ar::cuda {

constexpr int64_t kMaxDeviceFpTile = int64_t(1) << 16;

void fp_qdq_fwd(DeviceContext& ctx, const quant::FpQdqShape& sh, const float* W, const float* V, const float* beta,
                const float* init, const float* amax, float* What, uint16_t* What16, float* scale);

void fp_qdq_bwd(DeviceContext& ctx, const quant::FpQdqShape& sh, const float* W, const float* V, const float* beta,
                const float* init, const float* amax, const float* dWhat, float* dV, float* dbeta);

}  // namespace ar::cuda
