// bf16 mixed-precision GEMM groundwork (issue 10): CPU feature detection, fp32 <-> bf16 conversion and
// oneDNN matmuls (bf16 operands with fp32 accumulation, and oneDNN's fp32 matmul for comparison with
// OpenBLAS). Same layout conventions as cpu::gemm (kernels/cpu/ops.h): row-major, op(X) = X or X^T,
// leading dimensions in elements. bf16 values are raw uint16_t (the top half of an fp32, core/dtype.h).
// Tested in tests/test_kernels_bf16.cpp; measured by bench/gemm_bench.cpp (docs/benchmarks.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"  // Addends

namespace ar::cpu {

// bf16_convert.cpp — elementwise, spread over the context's pool (bits independent of threads).
// fp32 -> bf16 rounds to nearest even as PyTorch does (subnormals kept, overflow to +-inf, NaN stays a
// quiet NaN with its sign and top payload bits); equals ar::f32_to_bf16 element by element.
void fp32_to_bf16(Context& ctx, const float* src, uint16_t* dst, int64_t n);
// The same on the calling thread (a block inside another kernel) on the given level's path (the
// caller's kernel_isa()); every level gives the same bits.
void fp32_to_bf16_serial(const float* src, uint16_t* dst, int64_t n, Isa isa);
// bf16 -> fp32 is exact.
void bf16_to_fp32(Context& ctx, const uint16_t* src, float* dst, int64_t n);
void bf16_to_fp32_serial(const uint16_t* src, float* dst, int64_t n, Isa isa);

// Producers of GEMM operands that write them in bf16 only (no fp32 array in memory): the same bits as
// the fp32 kernel (ops.h) followed by fp32_to_bf16. rmsnorm.cpp, swiglu.cpp.
void rmsnorm_fwd_bf16(Context& ctx, const float* x, const float* w, uint16_t* y, float* rstd, int64_t rows,
                      int64_t dim, double eps);
void swiglu_fwd_bf16(Context& ctx, const float* g, const float* u, uint16_t* a, int64_t n, const GateAct& act = {});
void swiglu_bwd_bf16(Context& ctx, const float* da, const float* g, const float* u, uint16_t* dg, uint16_t* du,
                     int64_t n, const GateAct& act = {});
// transpose.cpp — dst [cols, rows] = src [rows, cols]^T (a copy, spread over the pool).
void transpose_bf16(Context& ctx, const uint16_t* src, uint16_t* dst, int64_t rows, int64_t cols);

// matmul_dnnl.cpp — oneDNN matmuls.
// Applies AR_CPU_ISA to oneDNN (dnnl::set_max_cpu_isa) once, before its first primitive: every entry
// point below calls it; code that makes its own oneDNN engine (benchmarks, tests) calls it first.
void dnnl_isa_cap();
// True where the CPU has bf16 dot products (AVX512_BF16 or AMX-BF16) and oneDNN will use them (its
// effective ISA, which ONEDNN_MAX_CPU_ISA may lower, includes bf16). gemm_bf16 requires it;
// callers fall back to the fp32 path (cpu::gemm) where it is false.
bool bf16_gemm_supported();
// True where oneDNN's fp32 matmul runs its brgemm kernels (AVX-512 and up; read once): only then do
// large dense fp32 products go to oneDNN (cpu::gemm), elsewhere all of them to OpenBLAS.
bool dnnl_f32_is_brgemm();
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
// How many units' oneDNN primitives `ctx` keeps (made once per unit shape, at most 512: past that the
// cache starts over). For tests and benchmarks.
size_t dnnl_cached_units(Context& ctx);
// The same with the units all on the calling thread when `serial` (same bits).
void gemm_f32_dnnl(Context& ctx, bool serial, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add = {});
// gemm_rows_bf16.cpp — C[M,N] = alpha * A[M,K] op(B)[K,N] + beta * C (beta == 0: C is not read), A and B
// bf16, where every element is one chain of VDPBF16PS steps over k's pairs in order (the file says
// exactly): a row's bits do not depend on the call's other rows, its tile or the thread count, so
// callers may stack rows of several batches into one call (the tuner's MoE experts under --amp,
// cpu_ops.h). oneDNN's rows do depend on M. Requires gemm_rows_bf16_supported() (AVX512_BF16 at the
// process's level).
bool gemm_rows_bf16_supported();
void gemm_rows_bf16(Context& ctx, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                    int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
// Its packed panel of op(B)'s columns [j0, j0 + nr) (nr <= 32): word p * 32 + jj holds op(B)[2p, j0 + jj]
// in the low half and op(B)[2p + 1, j0 + jj] in the high half, zeros past K and nr; (K + 1) / 2 * 32
// words. The vector pack and its definition, for tests.
void gemm_rows_bf16_pack(bool tb, const uint16_t* B, int64_t ldb, int64_t K, int64_t j0, int64_t nr, uint32_t* out);
void gemm_rows_bf16_pack_ref(bool tb, const uint16_t* B, int64_t ldb, int64_t K, int64_t j0, int64_t nr,
                             uint32_t* out);

// grad_tree_bf16.cpp — a tuning tree's weight gradient over several leaves, in one pass over dW
// [out, in] (the tuner's MoE experts under --amp: quant/expert_grad_tree.h; a leaf's own product,
// cpu_ops.h). Leaf l's product P_l = dy_l^T x_l (dy_l [rows, out], x_l [rows, in], bf16, row-major) has
// every element as gemm_rows_bf16's chain over the leaf's rows (the file says exactly), so it depends on
// nothing but the leaf's rows. The steps (GradTreeStep, ops.h) as weight_grad_tree_f32's. Requires
// gemm_rows_bf16_supported().
struct GradLeafBf16 {
  const uint16_t* dy = nullptr;
  const uint16_t* x = nullptr;
  int64_t rows = 0;  // 0: P_l = 0
};
void weight_grad_tree_bf16(Context& ctx, const std::vector<GradLeafBf16>& leaves,
                           const std::vector<GradTreeStep>& steps, Addends extra, int64_t out, int64_t in, float* dW);

// A GEMM's B operand [K, N] bf16 in the matmul kernel's blocked layout, packed once for the many GEMMs
// that read it (a weight read by every sample of an iteration, an activation read by the weight
// gradients of q, k and v): they then skip their own per-unit packing and run 3-8% faster (256-row
// units). From a row-major M [rows, cols]: B = M^T (transposed; the forward's W^T) or B = M (the input
// gradient's W, a weight gradient's activation), written in one pass by pack_bf16.cpp where the kernel
// asks for its usual layout, else through oneDNN's reorder. The bits of a GEMM on the packed operand
// equal those on the plain one (tested), except under oneDNN's AMX kernel, which sums K in blocks of
// another size when it packs a plain B itself (last-bit differences); there every GEMM of a shape still
// takes one path (takes_layout decides from the shape), so the bits depend on nothing else.
// pack_later defers the pass to the first GEMM that takes the layout (gemm_bf16 below): short products
// (a MoE expert's few routed rows of one sample) read a plain B, so a weight only they read is never
// packed, and its buffer never allocated. The source must stay as it is until then, and two GEMMs must
// not first-use one PackedB at once (a weight's GEMMs run one after another).
class PackedB {
 public:
  void pack(Context& ctx, const uint16_t* M, int64_t rows, int64_t cols, bool transposed);
  void pack_later(const uint16_t* M, int64_t rows, int64_t cols, bool transposed);
  bool tried() const { return K_ > 0; }  // pack() or pack_later() ran (it may have found nothing to pack)
  bool packed() const { return buf_.defined() && !src_; }  // buf_ holds the last source's pack
  int64_t K() const { return K_; }
  int64_t N() const { return N_; }

 private:
  friend bool gemm_bf16(Context&, bool, int64_t, float, const uint16_t*, int64_t, const PackedB&, float, float*,
                        int64_t, Addends);
  // And the layout the kernel asks for: from ctx's cache where given (pack), else asked of oneDNN.
  void set_shape(Context* ctx, int64_t rows, int64_t cols, bool transposed);
  void write(Context& ctx) const;  // src_ into buf_
  int64_t K_ = 0, N_ = 0;
  std::shared_ptr<const void> layout_;  // the blocked memory descriptor of buf_; null: nothing to pack
  // A deferred pass (pack_later): its source, written into buf_ by the first GEMM that takes the
  // layout (logically const: the GEMM's result does not depend on when the pass ran).
  mutable const uint16_t* src_ = nullptr;
  int64_t rows_ = 0, cols_ = 0;
  bool transposed_ = false;
  mutable Tensor buf_;
};
// C[M,N] = alpha * op(A)[M,K] B[K,N] + beta * C with B packed (op(A) as in gemm_bf16 above). False,
// and nothing computed, where the GEMM's units do not take B's layout (or nothing was packed): the
// caller then runs the plain GEMM.
bool gemm_bf16(Context& ctx, bool ta, int64_t M, float alpha, const uint16_t* A, int64_t lda, const PackedB& B,
               float beta, float* C, int64_t ldc, Addends add = {});

// pack_bf16.cpp — W [out, in] into oneDNN's "BA16a64b2a" layout of B = W^T [in, out] (pack_wt_blocked)
// or B = W [out, in] (pack_w_blocked); dst holds K * N elements. Requires blocked_layout_fits(K, N):
// K a multiple of 32, N of 64.
bool blocked_layout_fits(int64_t K, int64_t N);
void pack_wt_blocked(Context& ctx, const uint16_t* W, int64_t out, int64_t in, uint16_t* dst);
void pack_w_blocked(Context& ctx, const uint16_t* W, int64_t out, int64_t in, uint16_t* dst);

// The oneDNN implementation that runs the first unit of such a GEMM on dense operands
// (e.g. "brg:avx512_core_bf16"), for logs and benchmarks.
std::string dnnl_matmul_impl(bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K);

// A Linear's weight W [out, in] in bf16 for its GEMMs: W rounded (b), and optionally packed once for
// many calls: the forward's operand W^T ([in, out] as B) and the input gradient's W ([out, in] as B).
struct Bf16Weight {
  const uint16_t* b = nullptr;
  const PackedB* fwd = nullptr;
  const PackedB* dx = nullptr;
};

// linear_bf16.cpp — linear_fwd / linear_bwd of ops.h with bf16 GEMM operands and fp32 accumulation
// (--amp). x comes with its bf16 copy xb, or xb null (rounded here); likewise W with w (null: rounded
// here, read in place) and dy with dyb (dy may be null when dyb is given and db is null, as for a
// gradient produced in bf16 only). dW += dy^T x (accumulate_dW) or dW = dy^T x, then
// dW_add added in order (gemm's `add`). Requires bf16_gemm_supported().
void linear_fwd_bf16(Context& ctx, const float* x, const uint16_t* xb, const float* W, const Bf16Weight* w,
                     const float* b, float* y, int64_t n, int64_t in, int64_t out);
// xp (optional): x packed for the weight gradient, packed here on first use and kept by the caller
// for the next Linear that reads the same x.
// The forward and the input gradient on gemm_rows_bf16 (bf16 operands as above): rows independent of
// the call's other rows. dx = dy W, or dx += dy W (accumulate_dx).
void linear_fwd_bf16_rows(Context& ctx, const float* x, const uint16_t* xb, const float* W, const Bf16Weight* w,
                          const float* b, float* y, int64_t n, int64_t in, int64_t out);
void linear_dx_bf16_rows(Context& ctx, const float* dy, const uint16_t* dyb, const float* W, const Bf16Weight* w,
                         float* dx, bool accumulate_dx, int64_t n, int64_t in, int64_t out);
void linear_bwd_bf16(Context& ctx, const float* dy, const uint16_t* dyb, const float* x, const uint16_t* xb, const float* W,
                     const Bf16Weight* w, float* dx, bool accumulate_dx, float* dW, bool accumulate_dW, float* db,
                     int64_t n, int64_t in, int64_t out, Addends dW_add = {}, PackedB* xp = nullptr);

}  // namespace ar::cpu
