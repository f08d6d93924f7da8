// The decoder block's non-GEMM kernels on the device (every pointer a device pointer), one thread per
// unit of the reference kernels (kernels/ref/*: the same AR_HD code the CPU tests run in double):
// rmsnorm.cu, rope.cu, swiglu.cu, elementwise.cu, attention.cu, loss.cu. Semantics as the references'. These
// are the correct first versions, not the fast ones (a row, head or query per thread, serial inside),
// except attention, which has tiled kernels too (attention_tiled.cu).
#pragma once
#include <cstdint>

#include "kernels/cuda/device.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/gate_act_ref.h"
#include "kernels/ref/rope_ref.h"

namespace ar::cuda {

void rmsnorm_fwd(DeviceContext& ctx, const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                 double eps);
// dx overwritten (or added to with accumulate); dw (may be null) accumulates.
void rmsnorm_bwd(DeviceContext& ctx, const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                 bool accumulate, float* dw, int64_t rows, int64_t dim);

void rope(DeviceContext& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
          int64_t heads, const RopeDims& d, bool inverse);

// The gated activation (kernels/ref/gate_act_ref.h; SwiGLU unless `act` says otherwise).
void swiglu_fwd(DeviceContext& ctx, const float* g, const float* u, float* a, int64_t n, const GateAct& act = {});
void swiglu_bwd(DeviceContext& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n,
                const GateAct& act = {});

// y = o sigmoid(g) and its backward (kernels/ref/output_gate_ref.h).
void output_gate_fwd(DeviceContext& ctx, const float* o, const float* g, float* y, int64_t n);
void output_gate_bwd(DeviceContext& ctx, const float* dy, const float* o, const float* g, float* d_o, float* dg,
                     int64_t n);

void add(DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// y = bf16 of x, round to nearest even (core/dtype.h's f32_to_bf16): the --amp GEMM operands.
void to_bf16(DeviceContext& ctx, const float* x, uint16_t* y, int64_t n);
// y (+)= x over n entries; bias rows: y[r, c] += b[c] for r < rows (c < cols).
void add_bias(DeviceContext& ctx, const float* b, float* y, int64_t rows, int64_t cols);
// db[c] += sum over rows of dy[r, c].
void bias_grad(DeviceContext& ctx, const float* dy, float* db, int64_t rows, int64_t cols);

// Attention: the tiled flash-style kernels (attention_tiled.h) where they fit (head dim a multiple of 16 up
// to 128, 16-byte aligned tensors), else the unit kernels, one thread per query or key. Units forces the
// unit kernels (tests and benches compare the two).
enum class AttnKernels { Fastest, Units };
void attention_fwd(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse, AttnKernels kernels = AttnKernels::Fastest);
// dq, dk, dv overwritten; delta: scratch of B * H * Tq.
void attention_bwd(DeviceContext& ctx, const ref::AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* delta,
                   float* dq, float* dk, float* dv, AttnKernels kernels = AttnKernels::Fastest);

// The tuning loss (loss.cu): per token row r, row_loss[r] = sum_k (y - target)^2 (0 where on[r] == 0), and
// target_dy is overwritten with dL/dy = 2 (y - target) / denom, as the CPU tuner computes both.
void mse_loss_rows(DeviceContext& ctx, const float* y, float* target_dy, const uint8_t* on, int64_t rows, int64_t C,
                   double denom, double* row_loss);

}  // namespace ar::cuda
