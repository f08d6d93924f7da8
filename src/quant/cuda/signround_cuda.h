// SignRound on one GPU: the algorithm, defaults, sampler and best-iterate rule of signround_tune_block
// (quant/signround.h) for integer and float weights (MXFP4/8, NVFP4, FP8 by channel or block; NVFP4's fused
// Linears share their global scale as on the CPU), with the block's forward and backward on the device
// (BlockRunner<cuda::CudaOps>), the QDQ forward/backward and the sign step on the device
// (kernels/cuda/qdq_int.h, qdq_fp.h, sign_step.h), and the loss as the CPU tuner takes it. Each iteration runs
// the whole batch of bs * GAS samples in micro-batches of bs (the CPU's non-deterministic leaves); its
// gradient is the same full-batch gradient. The calibration activations, the block's weights and the
// tuning state live on the device for the whole block.
// --amp: the GEMMs take bf16 operands with fp32 accumulation (kernels/cuda/cuda_ops.h), the QDQ written
// in bf16 directly; everything else stays fp32, as on the CPU.
// Not yet (each refused naming it): float weights with one scale per tensor, GGUF weights, FP8_STATIC, MoE
// blocks, key masks, data-parallel lanes.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "quant/signround.h"

namespace ar::quant {

// As signround_tune_block, with `host` for the host-side tensors (the result's tunables and the
// weights' QDQ values written back to w).
BlockTuneResult signround_tune_block_cuda(cuda::DeviceContext& dev, Context& host, const BlockDims& dims,
                                          BlockWeights& w, const QuantFormat& fmt, const BlockAux<float>& aux,
                                          const Tensor& x_in, const Tensor& y_fp,
                                          const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                          const LayerFormats* layers = nullptr);

}  // namespace ar::quant
