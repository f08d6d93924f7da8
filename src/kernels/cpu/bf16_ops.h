// bf16 mixed-precision GEMM groundwork (issue 10): CPU feature detection, fp32 <-> bf16 conversion and
// oneDNN matmuls (bf16 operands with fp32 accumulation, and oneDNN's fp32 matmul for comparison with
// OpenBLAS). Same layout conventions as cpu::gemm (kernels/cpu/ops.h): row-major, op(X) = X or X^T,
// leading dimensions in elements. bf16 values are raw uint16_t (the top half of an fp32, core/dtype.h).
// Tested in tests/test_kernels_bf16.cpp; measured by bench/gemm_bench.cpp (docs/benchmarks.md).
#pragma once
#include <cstdint>
#include <string>

#include "core/context.h"
#include "kernels/cpu/ops.h"  // Addends

namespace ar::cpu {

// isa.cpp — cpuid + xgetbv (the OS must save the ZMM / tile state), read on every call (cheap).
struct CpuIsa {
  bool avx512 = false;       // AVX512F + BW + VL usable
  bool avx512_bf16 = false;  // VDPBF16PS / VCVTNEPS2BF16 usable
  bool amx_bf16 = false;     // AMX-BF16 + AMX-TILE present and tile state enabled in XCR0
};
CpuIsa cpu_isa();

// bf16_convert.cpp — elementwise, spread over the context's pool (bits independent of threads).
// fp32 -> bf16 rounds to nearest even as PyTorch does (subnormals kept, overflow to +-inf, NaN stays a
// quiet NaN with its sign and top payload bits); equals ar::f32_to_bf16 element by element.
void fp32_to_bf16(Context& ctx, const float* src, uint16_t* dst, int64_t n);
// bf16 -> fp32 is exact.
void bf16_to_fp32(Context& ctx, const uint16_t* src, float* dst, int64_t n);
// transpose.cpp — dst [cols, rows] = src [rows, cols]^T (a copy, spread over the pool).
void transpose_bf16(Context& ctx, const uint16_t* src, uint16_t* dst, int64_t rows, int64_t cols);

// matmul_dnnl.cpp — oneDNN matmuls.
// True where the CPU has bf16 dot products (AVX512_BF16 or AMX-BF16) and oneDNN will use them (its
// effective ISA, which ONEDNN_MAX_CPU_ISA may lower, includes bf16). gemm_bf16 requires it;
// callers fall back to the fp32 path (cpu::gemm) where it is false.
bool bf16_gemm_supported();
// One line for logs: "avx512_bf16", "amx_bf16", or why bf16 GEMMs are unavailable.
std::string bf16_support_summary();

// C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C (beta == 0: C is not read).
// A and B bf16, C fp32, products and sums in fp32 (exact bf16 products). Throws Unsupported where
// bf16_gemm_supported() is false.
// `add` as cpu::gemm's (ops.h): added after the product in order, one rounding each.
void gemm_bf16(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add = {});
// The same on fp32 operands with oneDNN's fp32 matmul (any x86-64 CPU).
void gemm_f32_dnnl(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add = {});
// The same with the units all on the calling thread when `serial` (same bits).
void gemm_f32_dnnl(Context& ctx, bool serial, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add = {});
// The oneDNN implementation that runs the first unit of such a GEMM on dense operands
// (e.g. "brg:avx512_core_bf16"), for logs and benchmarks.
std::string dnnl_matmul_impl(bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K);

// linear_bf16.cpp — linear_fwd / linear_bwd of ops.h with bf16 GEMM operands and fp32 accumulation
// (--amp). x comes with its bf16 copy xb, or xb null (rounded here); likewise W with Wb; dy is rounded
// per call. WbT (optional) is Wb transposed, [in, out]: dx = dy W then reads it as a transposed operand,
// the layout oneDNN's bf16 brgemm runs fastest (bench/gemm_bench --layouts 1: 10-14% faster than W
// itself). dW += dy^T x (accumulate_dW) or dW = dy^T x, then dW_add added in order (gemm's `add`).
// Requires bf16_gemm_supported().
void linear_fwd_bf16(Context& ctx, const float* x, const uint16_t* xb, const float* W, const uint16_t* Wb,
                     const float* b, float* y, int64_t n, int64_t in, int64_t out);
void linear_bwd_bf16(Context& ctx, const float* dy, const float* x, const uint16_t* xb, const float* W,
                     const uint16_t* Wb, const uint16_t* WbT, float* dx, bool accumulate_dx, float* dW, bool accumulate_dW, float* db,
                     int64_t n, int64_t in, int64_t out, Addends dW_add = {});

}  // namespace ar::cpu
