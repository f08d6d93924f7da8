// A dense block's tensors and RoPE tables on one GPU, shared by the tuner (signround_cuda.h) and the
// block passes (block_pass_cuda.h).
#pragma once
#include <cstdint>
#include <map>

#include "kernels/cuda/device.h"
#include "model/block_impl.h"
#include "model/loader.h"

namespace ar::quant {

// Every defined tensor of w uploaded once, and the BlockPtrs that point at the copies.
struct DeviceBlock {
  std::map<const float*, cuda::DeviceArray<float>> held;  // host pointer -> its device copy
  BlockPtrs<const float*> ptrs;
};
DeviceBlock upload_dense_block(cuda::DeviceContext& dev, const BlockWeights& w);

// RoPE for micro-batches of up to `samples` samples: each row's position (aux.pos of the sample's T
// tokens, repeated) and the cos/sin tables up to the largest position (head_dim / 2 per position).
struct DeviceRope {
  cuda::DeviceArray<int32_t> pos;
  cuda::DeviceArray<float> cos, sin;
};
DeviceRope upload_rope(cuda::DeviceContext& dev, const BlockAux<float>& aux, int64_t samples, int64_t head_dim);

}  // namespace ar::quant
