// fp32 fake quantization of a Linear weight on the CPU: the formulas of qdq_ref.h run over row
// ranges on the context's thread pool (rows are independent, so results equal the serial order).
#pragma once
#include "core/context.h"
#include "kernels/cpu/isa.h"
#include "quant/qdq_ref.h"

namespace ar::quant {

// Checks bits (2, 3, 4, 8) and group size (-1 or > 0) and returns the effective shape.
QdqShape make_qdq_shape(int64_t out, int64_t in, int bits, int64_t group_size, bool sym);

void qdq_minmax(Context& ctx, const QdqShape& sh, const float* W, float* wmin0, float* wmax0);
void qdq_fwd(Context& ctx, const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
             const float* wmin0, const float* wmax0, float* What, float* scale, float* zero);
// The same with What written as bf16 (the --amp GEMM operand; equals f32_to_bf16 of the fp32 What).
void qdq_fwd(Context& ctx, const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
             const float* wmin0, const float* wmax0, uint16_t* What, float* scale, float* zero);
// qdq_fwd<float, Out> of qdq_ref.h over rows [r0, r1) on the calling thread at the given level's path:
// 16 columns at a time on AVX-512, 8 on AVX2, else scalar (qdq_fwd_simd.cpp), the same bits on every
// path. The Context forms above run cpu::kernel_isa()'s path over the pool.
void qdq_fwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, float* What, float* scale, float* zero, int64_t r0,
                  int64_t r1, cpu::Isa isa);
void qdq_fwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, uint16_t* What, float* scale, float* zero, int64_t r0,
                  int64_t r1, cpu::Isa isa);
void qdq_bwd(Context& ctx, const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
             const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha, float* dbeta);
// qdq_bwd<float> of qdq_ref.h over rows [r0, r1) on the calling thread, 16 columns at a time on
// AVX-512 or AVX2 (two halves of 8), else scalar (qdq_bwd_simd.cpp): the same bits on every path. The
// first form runs cpu::kernel_isa()'s path, the second the given level's (tests).
void qdq_bwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha, float* dbeta,
                  int64_t r0, int64_t r1);
void qdq_bwd_rows(const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
                  const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha, float* dbeta,
                  int64_t r0, int64_t r1, cpu::Isa isa);

}  // namespace ar::quant
