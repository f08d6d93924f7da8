#include "kernels/cuda/gemm.h"

#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/cuda/cublaslt_api.h"

namespace ar::cuda {

GemmPlan::~GemmPlan() {
  if (c) cublaslt().layout_destroy(c);
  if (b) cublaslt().layout_destroy(b);
  if (a) cublaslt().layout_destroy(a);
  if (op) cublaslt().desc_destroy(op);
}

void GemmPlan::swap(GemmPlan& o) noexcept {
  std::swap(op, o.op);
  std::swap(a, o.a);
  std::swap(b, o.b);
  std::swap(c, o.c);
  std::swap(algo, o.algo);
}

namespace {

// The largest power of two up to 256 that divides the address.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t v = 256;
  while (v > 1 && a % v != 0) v /= 2;
  return v;
}

std::string gemm_name(const GemmShape& s) {
  return "GEMM " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// The preference descriptor, needed only for the heuristic query.
struct LtPreference {
  cublasLtMatmulPreference_t p = nullptr;
  ~LtPreference() {
    if (p) cublaslt().pref_destroy(p);
  }
};

GemmPlan make_plan(DeviceContext& ctx, const GemmKey& k, const std::string& what) {
  const int dev = ctx.index();
  const cudaDataType_t ab = k.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const CublasLt& lt = cublaslt();
  GemmPlan p;
  check(lt.desc_create(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), dev, what);
  const cublasOperation_t ta = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(lt.desc_set(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), dev, what);
  check(lt.desc_set(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), dev, what);
  // Layouts describe the stored matrices: op(A) is m x k, so A is k x m when transposed.
  check(lt.layout_create(&p.a, ab, uint64_t(k.ta ? k.k : k.m), uint64_t(k.ta ? k.m : k.k), k.lda), dev, what);
  check(lt.layout_create(&p.b, ab, uint64_t(k.tb ? k.n : k.k), uint64_t(k.tb ? k.k : k.n), k.ldb), dev, what);
  check(lt.layout_create(&p.c, CUDA_R_32F, uint64_t(k.m), uint64_t(k.n), k.ldc), dev, what);
  LtPreference pref;
  check(lt.pref_create(&pref.p), dev, what);
  const size_t ws = ctx.workspace_bytes();
  check(lt.pref_set(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), dev, what);
  // The heuristic assumes 256-byte aligned operands unless told otherwise; an operand at an offset into
  // a buffer may have less.
  for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k.align_a},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k.align_b},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k.align_c},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k.align_c}})
    check(lt.pref_set(pref.p, attr, v, sizeof *v), dev, what);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  check(lt.heuristic(ctx.blas(), p.op, p.a, p.b, p.c, p.c, pref.p, 1, &best, &found), dev, what);
  if (found == 0) fail(ErrorKind::Unsupported, ctx.name() + ": cuBLASLt has no algorithm for " + what);
  p.algo = best.algo;
  return p;
}

}  // namespace

void gemm(DeviceContext& ctx, GemmType type, const GemmShape& s, const void* A, const void* B, float* C, bool acc) {
  if (s.m <= 0 || s.n <= 0) return;
  const int dev = ctx.index();
  if (s.k <= 0) {  // an empty sum: C = 0, or C unchanged
    if (!acc)
      check(cudaMemset2DAsync(C, size_t(s.ldc) * 4, 0, size_t(s.m) * 4, size_t(s.n), ctx.stream()), dev,
            gemm_name(s));
    return;
  }
  const GemmKey key{type == GemmType::BF16, s.ta, s.tb, s.m, s.n, s.k, s.lda, s.ldb, s.ldc,
                    alignment(A), alignment(B), alignment(C)};
  const GemmPlan& p = ctx.gemm_plans().get(key, [&] { return make_plan(ctx, key, gemm_name(s)); });
  const float alpha = 1.f, beta = acc ? 1.f : 0.f;
  const cublasStatus_t st = cublaslt().matmul(ctx.blas(), p.op, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c,
                                              &p.algo, ctx.workspace(), ctx.workspace_bytes(), ctx.stream());
  if (st != CUBLAS_STATUS_SUCCESS) check(st, dev, gemm_name(s));
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
