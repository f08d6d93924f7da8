// The Linear layer's three products on cuBLASLt, row-major like kernels/cpu's (y = x W^T):
//   linear_fwd: y[n, out]  (= or +=) x[n, in] W[out, in]^T
//   linear_dx:  dx[n, in]  (= or +=) dy[n, out] W[out, in]
//   linear_dw:  dW[out, in] (= or +=) dy[n, out]^T x[n, in]
// Operands are fp32 (--amp false: CUBLAS_COMPUTE_32F, no TF32) or bf16 (--amp: bf16 operands, fp32
// accumulation); the output is fp32 either way. `acc` adds into the output (beta = 1).
#pragma once
#include <cstdint>

#include "kernels/cuda/device.h"

namespace ar::cuda {

enum class GemmType { F32, BF16 };

// Column-major C[m, n] = op(A) op(B) (+ C): the one entry point the three products go through.
struct GemmShape {
  bool ta = false, tb = false;  // op(A) = A^T, op(B) = B^T
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
};
void gemm(DeviceContext& ctx, GemmType type, const GemmShape& s, const void* A, const void* B, float* C, bool acc);

void linear_fwd(DeviceContext& ctx, GemmType type, const void* x, const void* W, float* y, int64_t n, int64_t in,
                int64_t out, bool acc = false);
void linear_dx(DeviceContext& ctx, GemmType type, const void* dy, const void* W, float* dx, int64_t n, int64_t in,
               int64_t out, bool acc = false);
void linear_dw(DeviceContext& ctx, GemmType type, const void* dy, const void* x, float* dW, int64_t n, int64_t in,
               int64_t out, bool acc = false);

}  // namespace ar::cuda
