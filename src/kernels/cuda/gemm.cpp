#include "kernels/cuda/gemm.h"

#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/cuda/cublaslt_api.h"

namespace ar::cuda {

namespace {

// cuBLASLt descriptors, destroyed with the call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublaslt().pref_destroy(pref);
    if (c) cublaslt().layout_destroy(c);
    if (b) cublaslt().layout_destroy(b);
    if (a) cublaslt().layout_destroy(a);
    if (op) cublaslt().desc_destroy(op);
  }
};

// The largest power of two up to 256 that divides the address.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t v = 256;
  while (v > 1 && a % v != 0) v /= 2;
  return v;
}

std::string shape_str(const GemmShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

}  // namespace

void gemm(DeviceContext& ctx, GemmType type, const GemmShape& s, const void* A, const void* B, float* C, bool acc) {
  if (s.m <= 0 || s.n <= 0) return;
  const int dev = ctx.index();
  const std::string what = "GEMM " + shape_str(s);
  if (s.k <= 0) {  // an empty sum: C = 0, or C unchanged
    if (!acc) check(cudaMemset2DAsync(C, size_t(s.ldc) * 4, 0, size_t(s.m) * 4, size_t(s.n), ctx.stream()), dev, what);
    return;
  }
  const cudaDataType_t ab = type == GemmType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  const CublasLt& lt = cublaslt();
  LtDescs d;
  check(lt.desc_create(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), dev, what);
  const cublasOperation_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(lt.desc_set(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), dev, what);
  check(lt.desc_set(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), dev, what);
  // Layouts describe the stored matrices: op(A) is m x k, so A is k x m when transposed.
  check(lt.layout_create(&d.a, ab, uint64_t(s.ta ? s.k : s.m), uint64_t(s.ta ? s.m : s.k), s.lda), dev, what);
  check(lt.layout_create(&d.b, ab, uint64_t(s.tb ? s.n : s.k), uint64_t(s.tb ? s.k : s.n), s.ldb), dev, what);
  check(lt.layout_create(&d.c, CUDA_R_32F, uint64_t(s.m), uint64_t(s.n), s.ldc), dev, what);
  check(lt.pref_create(&d.pref), dev, what);
  const size_t ws = ctx.workspace_bytes();
  check(lt.pref_set(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), dev,
        what);
  // The heuristic assumes 256-byte aligned operands unless told otherwise; an operand at an offset into
  // a buffer may have less.
  const uint32_t align_a = alignment(A), align_b = alignment(B), align_c = alignment(C);
  for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c}})
    check(lt.pref_set(d.pref, attr, v, sizeof *v), dev, what);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  check(lt.heuristic(ctx.blas(), d.op, d.a, d.b, d.c, d.c, d.pref, 1, &best, &found), dev, what);
  if (found == 0) fail(ErrorKind::Unsupported, ctx.name() + ": cuBLASLt has no algorithm for " + what);
  const float alpha = 1.f, beta = acc ? 1.f : 0.f;
  check(lt.matmul(ctx.blas(), d.op, &alpha, A, d.a, B, d.b, &beta, C, d.c, C, d.c, &best.algo, ctx.workspace(),
                       ws, ctx.stream()),
        dev, what);
}

void linear_fwd(DeviceContext& ctx, GemmType type, const void* x, const void* W, float* y, int64_t n, int64_t in,
                int64_t out, bool acc) {
  // y^T [out, n] = (W stored [in, out])^T  x^T [in, n]
  gemm(ctx, type, {true, false, out, n, in, in, in, out}, W, x, y, acc);
}

void linear_dx(DeviceContext& ctx, GemmType type, const void* dy, const void* W, float* dx, int64_t n, int64_t in,
               int64_t out, bool acc) {
  // dx^T [in, n] = (W stored [in, out])  dy^T [out, n]
  gemm(ctx, type, {false, false, in, n, out, in, out, in}, W, dy, dx, acc);
}

void linear_dw(DeviceContext& ctx, GemmType type, const void* dy, const void* x, float* dW, int64_t n, int64_t in,
               int64_t out, bool acc) {
  // dW^T [in, out] = x^T [in, n]  (dy^T stored [out, n])^T
  gemm(ctx, type, {false, true, in, out, n, in, out, in}, x, dy, dW, acc);
}

}  // namespace ar::cuda
