// The tiled attention kernels (attention_tiled.cu), which attention_fwd / attention_bwd (block_kernels.h)
// run wherever they fit: head dims 16, 32, ..., 128 and 16-byte aligned tensors. Elsewhere the unit
// kernels of attention.cu run.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/device.h"
#include "kernels/ref/attention_ref.h"

namespace ar::cuda {

bool attention_tiled_fits(const ref::AttnShape& s, std::initializer_list<const void*> ptrs);

void attention_fwd_tiled(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                         const uint8_t* key_mask, float* o, float* lse);
// dq, dk, dv overwritten; delta (B * H * Tq) written by the dq pass and read by the dk/dv pass.
void attention_bwd_tiled(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                         const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* delta,
                         float* dq, float* dk, float* dv);

}  // namespace ar::cuda
