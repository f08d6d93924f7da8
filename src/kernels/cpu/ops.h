// CPU kernels (fp32): same op names and argument order as kernels/ref/*, plus the Context that
// supplies the thread pool and BLAS threading. Each op family lives in its own file in this folder
// and is tested against its reference in tests/test_kernels_cpu.cpp.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/gate_act_ref.h"
#include "kernels/ref/delta_net_ref.h"
#include "kernels/ref/gated_delta_ref.h"
#include "kernels/ref/rope_ref.h"

namespace ar::cpu {

// matmul.cpp — row-major (oneDNN brgemm, sgemm_fma.h at AVX2, OpenBLAS). C = alpha op(A) op(B) + beta C; with beta != 0 the finished product
// is added to C in one rounding (C + P, the bits of writing P with beta = 0 and adding it), on every path
// (oneDNN's sum post-op does so; OpenBLAS's K blocks would add partial sums: a scratch takes P first).
// `add`: matrices laid out as C (ldc) added after that, in order, each addition rounded once:
// C = ((beta C + P) + add[0]) + add[1] ... (oneDNN: binary post-ops).
using Addends = std::span<const float* const>;
// packed (optional): op(B) packed beforehand (PackedF32 below, of this product's K and N), read where
// the product's kernel takes it; the same bits either way.
class PackedF32;
void gemm(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add = {},
          const PackedF32* packed = nullptr);
// The same GEMM (same units, same bits) entirely on the calling thread, for callers that already run
// inside one of the pool's chunks (the pool does not nest); ctx supplies scratch memory only.
void gemm_serial(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The same product where every element is one FMA chain over k = 0..K-1 (sgemm_fma.h's definition),
// on every level (the AVX2 kernel from AVX2 on, the reference loop below): a row's bits do not depend on
// the other rows of the call, so callers may stack rows of several batches into one call (the tuner's
// MoE experts, quant/signround.cpp). No addends.
void gemm_rows(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// An fp32 GEMM's B operand [K, N] packed once for the several GEMMs that read it, as the AVX2 level's
// FMA-chain kernel takes it (sgemm_fma.h's panels): an activation read by the weight gradients of q, k
// and v (or gate and up). Those GEMMs split C by rows, and each of their units packed all of op(B);
// with the pack they skip that, and their bits equal the plain GEMM's (the pack is a copy). From a
// row-major M [rows, cols]: B = M^T (transposed) or B = M. Only that kernel reads a pack: on every
// other level pack() keeps nothing (packed() false) and the GEMMs run plain.
// Weights are not packed this way: packed once per iteration for all its leaves, W^T and W measured no
// faster on Zen 4 (the kernel's own packing streams W from memory as the pack's reads would, and the
// two packs doubled the weights' footprint in the caches; docs/benchmarks.md).
class PackedF32 {
 public:
  static bool useful();  // this process's GEMMs read packs (the AVX2 level)
  void pack(Context& ctx, const float* M, int64_t rows, int64_t cols, bool transposed);
  bool tried() const { return K_ > 0; }
  bool packed() const { return buf_.defined(); }
  int64_t K() const { return K_; }
  int64_t N() const { return N_; }
  const float* panels() const { return buf_.f32(); }

 private:
  int64_t K_ = 0, N_ = 0;
  Tensor buf_;
};
// grad_tree_f32.cpp — a tuning tree's weight gradient over several leaves in one pass over dW [out, in]
// (the tuner's deterministic MoE experts: quant/expert_grad_tree.h; a leaf's own product, cpu_ops.h).
// Leaf l's product P_l = dy_l^T x_l (dy_l [rows, out], x_l [rows, in], row-major) has every element
// as one FMA chain over the leaf's rows in order (sgemm_fma.h's definition), so it depends on nothing
// but the leaf's rows. Step l (one per leaf, in order) sets buffer `dst` to P_l, plus buffer dst when
// `accumulate`, plus each buffer of `adds` in order, one rounding per addition. Buffer 0 is dW (its old
// values read where a step reads it before any writes it); k > 0 are the kernel's own scratch (written
// before read); k < 0 is extra[-1 - k], a matrix laid out as dW. Needs AVX2 (the level's kernels).
struct GradTreeStep {
  int dst = 0;
  bool accumulate = false;
  std::vector<int> adds;
};
struct GradLeafF32 {
  const float* dy = nullptr;
  const float* x = nullptr;
  int64_t rows = 0;  // 0: P_l = 0
};
bool weight_grad_tree_f32_supported();
void weight_grad_tree_f32(Context& ctx, const std::vector<GradLeafF32>& leaves, const std::vector<GradTreeStep>& steps,
                          Addends extra, int64_t out, int64_t in, float* dW);
// The buffers the steps use (1 + the largest index) and whether buffer 0's old values start the tree;
// throws (Internal) on a step list that reads a scratch buffer before writing it or names a missing one.
int grad_tree_buffers(const std::vector<GradTreeStep>& steps, size_t extra, bool& init_from_dw);

void linear_fwd(Context& ctx, const float* x, const float* W, const float* b, float* y, int64_t n, int64_t in,
                int64_t out);
// dW += dy^T x, or dW = dy^T x with accumulate_dW false; then dW_add added in order (gemm's `add`).
// xp (optional): x packed for the weight gradient (PackedF32), packed here on its first use and kept by
// the caller for the next Linear that reads the same x.
void linear_bwd(Context& ctx, const float* dy, const float* x, const float* W, float* dx, bool accumulate_dx, float* dW,
                float* db, int64_t n, int64_t in, int64_t out, bool accumulate_dW = true, Addends dW_add = {},
                PackedF32* xp = nullptr);

// y[r, :] += b; db += column sums of dy (rows in order, columns split over threads).
void add_bias(Context& ctx, const float* b, float* y, int64_t n, int64_t out);
void add_column_sums(Context& ctx, const float* dy, float* db, int64_t n, int64_t out);

// rmsnorm.cpp
void rmsnorm_fwd(Context& ctx, const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                 double eps);
void rmsnorm_bwd(Context& ctx, const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                 bool accumulate, float* dw, int64_t rows, int64_t dim);

// rope.cpp (in place)
void rope_fwd(Context& ctx, float* x, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
              int64_t heads, const RopeDims& d);
void rope_bwd(Context& ctx, float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t rows,
              int64_t heads, const RopeDims& d);

// attention.cpp (semantics: kernels/ref/attention_ref.h; AttnShape::window, sinks [H] or null)
using ref::AttnShape;
void attention_fwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse, const float* sinks = nullptr);
void attention_bwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* dq, float* dk,
                   float* dv);
// The sinks' gradient (dsinks [H] overwritten), from the forward's o and lse.
void attention_sink_grad(Context& ctx, const AttnShape& s, const float* sinks, const float* o, const float* lse,
                         const float* dout, float* dsinks);

// gated_delta.cpp: the gated delta rule (kernels/ref/gated_delta_ref.h), threads over (batch row, key
// head). The forward stores the state at the start of each kDeltaChunk-token chunk into `checkpoints`
// (gated_delta_checkpoint_floats floats; null: not kept, no backward); the backward recomputes a chunk's
// states from them ((kDeltaChunk + 1) Dk Dv floats per work item in flight). dq, dk, dv, dg, dbeta are written.
constexpr int64_t kDeltaChunk = 64;
int64_t gated_delta_checkpoint_floats(const ref::DeltaShape& s);
void gated_delta_fwd(Context& ctx, const ref::DeltaShape& s, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* o, float* checkpoints,
                     const float* initial_state = nullptr, float* final_state = nullptr);
void gated_delta_bwd(Context& ctx, const ref::DeltaShape& s, const float* dO, const float* q, const float* k,
                     const float* v, const float* g, const float* beta, const float* checkpoints, float* dq, float* dk,
                     float* dv, float* dg, float* dbeta);

// delta_net.cpp: Gated DeltaNet's row and element ops (kernels/ref/delta_net_ref.h); weight gradients
// accumulate where non-null.
void conv_silu_fwd(Context& ctx, const float* x, const float* w, float* y, float* z, int64_t B, int64_t T, int64_t C,
                   int64_t K);
void conv_silu_bwd(Context& ctx, const float* dy, const float* z, const float* x, const float* w, float* dx, float* dw,
                   int64_t B, int64_t T, int64_t C, int64_t K);
void l2norm_fwd(Context& ctx, const float* x, float* y, int64_t rows, int64_t dim, float scale);
void l2norm_bwd(Context& ctx, const float* dy, const float* x, float* dx, int64_t rows, int64_t dim, float scale);
void gated_rmsnorm_fwd(Context& ctx, const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t dim,
                       double eps);
void gated_rmsnorm_bwd(Context& ctx, const float* dy, const float* x, const float* z, const float* w, float* dx,
                       float* dz, float* dw, int64_t rows, int64_t dim, double eps);
void decay_beta_fwd(Context& ctx, const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                    float* beta, int64_t rows, int64_t H);
void decay_beta_bwd(Context& ctx, const float* dg, const float* dbeta, const float* a, const float* b,
                    const float* A_log, const float* dt_bias, float* da, float* db, float* dA_log, float* ddt_bias,
                    int64_t rows, int64_t H);

// swiglu.cpp: the gated activation (kernels/ref/gate_act_ref.h; SwiGLU unless `act` says otherwise)
void swiglu_fwd(Context& ctx, const float* g, const float* u, float* a, int64_t n, const GateAct& act = {});
void swiglu_bwd(Context& ctx, const float* da, const float* g, const float* u, float* dg, float* du, int64_t n,
                const GateAct& act = {});

// output_gate.cpp: y = o sigmoid(g) and its backward (kernels/ref/output_gate_ref.h)
void output_gate_fwd(Context& ctx, const float* o, const float* g, float* y, int64_t n);
void output_gate_bwd(Context& ctx, const float* dy, const float* o, const float* g, float* d_o, float* dg, int64_t n);

// exp.cpp — x[i] = exp(x[i]) on the calling thread; within 2 ulp of exp (0 below FLT_MIN), the same bits on every
// path (AVX-512 or AVX2 lanes, or scalar), so results do not depend on how a loop was chunked or on
// the machine. The first form runs kernel_isa()'s path, the second the given level's (tests).
void exp_inplace(float* x, int64_t n);
void exp_inplace(float* x, int64_t n, Isa isa);

// act_qdq.cpp — FP8_STATIC's activation QDQ with one static scale s (formulas: kernels/ref/act_qdq_ref.h).
// The backward writes dx (or adds to it with acc; dx may be null) and returns dL/ds, summed per row of
// `dim` in double and over rows in order.
void act_qdq_fwd(Context& ctx, const float* x, float s, float* y, int64_t n);
double act_qdq_bwd(Context& ctx, const float* x, float s, const float* dq, float* dx, bool acc, int64_t rows,
                   int64_t dim);

// elementwise.cpp
void add(Context& ctx, const float* a, const float* b, float* y, int64_t n);

// embedding.cpp: out = E[ids] (times `scale`: Gemma's embedding scale)
void embedding_fwd(Context& ctx, const float* E, const int32_t* ids, float* out, int64_t rows, int64_t dim,
                   float scale = 1.f);
void embedding_bwd(Context& ctx, const float* dout, const int32_t* ids, float* dE, int64_t rows, int64_t dim);

// xent.cpp
void log_softmax(Context& ctx, const float* z, float* logp, int64_t rows, int64_t V);
// Mean cross-entropy over rows with target >= 0 (accumulated in double); dz optional.
double cross_entropy(Context& ctx, const float* z, const int32_t* targets, float* dz, float dloss, int64_t rows,
                     int64_t V);

}  // namespace ar::cpu
