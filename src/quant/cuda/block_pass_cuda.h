// The block's forward over calibration samples on one GPU: the FP and quantized-input passes of
// `quantize --device cuda:N` (pipeline/quantize_block.cpp), where they gather no statistics.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/device.h"
#include "model/block_impl.h"
#include "model/loader.h"

namespace ar::quant {

// y[s] = block(x[s]) for samples s in [0, n) of x and y ([n, T, C] host tensors, fp32 or bf16), in
// micro-batches of up to bs samples, with the block's weights and one micro-batch on the device. amp:
// bf16 GEMM operands (each Linear's weight rounded once) with fp32 accumulation, as the GPU tuner's
// forward. `host` converts bf16 activations. Refused, naming them: MoE blocks and key masks.
void block_forward_cuda(cuda::DeviceContext& dev, Context& host, const BlockDims& dims, const BlockWeights& w,
                        const BlockAux<float>& aux, const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp);

}  // namespace ar::quant
