// Policy object exposing the reference kernels under the op table used by generic compositions
// (model/block_impl.h). Scratch buffers are std::vector<T>. Instantiate with T = double for
// finite-difference checks. cpu/cpu_ops.h (and later cuda/) provide the same member functions.
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/ref/act_qdq_ref.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/delta_net_ref.h"
#include "kernels/ref/gated_delta_ref.h"
#include "kernels/ref/elementwise_ref.h"
#include "kernels/ref/output_gate_ref.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/rmsnorm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "kernels/ref/gate_act_ref.h"

namespace ar::ref {

template <class T>
struct RefOps {
  using Real = T;
  using Buf = std::vector<T>;
  Buf alloc(int64_t n) { return Buf(size_t(n), T(0)); }
  static T* ptr(Buf& b) { return b.data(); }
  void copy(const T* src, T* dst, int64_t n) { std::copy(src, src + n, dst); }
  // `cols` elements of each of `rows` rows, between row strides (a column block of a matrix).
  void copy_cols(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) std::copy(src + r * src_stride, src + r * src_stride + cols, dst + r * dst_stride);
  }
  // dst's column block += src's (rows x cols, row strides as copy_cols).
  void add_cols(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) dst[r * dst_stride + i] += src[r * src_stride + i];
  }
  void zero(T* dst, int64_t n) { std::fill(dst, dst + n, T(0)); }

  // A GEMM operand (an activation or an output gradient), prepared once for every Linear that reads it;
  // the *_operand producers keep its storage in `own`.
  struct Operand {
    const T* x = nullptr;
    Buf own;
  };
  Operand operand(const T* x, int64_t) { return {x, {}}; }
  Operand rmsnorm_operand(const T* x, const T* w, T* rstd, int64_t rows, int64_t dim, double eps) {
    Buf y = alloc(rows * dim);
    ref::rmsnorm_fwd(x, w, y.data(), rstd, rows, dim, eps);
    return owned(std::move(y));
  }
  Operand swiglu_operand(const T* g, const T* u, int64_t n, const GateAct& act = {}) {
    Buf a = alloc(n);
    ref::gate_fwd(act, g, u, a.data(), n);
    return owned(std::move(a));
  }
  std::pair<Operand, Operand> swiglu_bwd_operands(const T* da, const T* g, const T* u, int64_t n,
                                                  const GateAct& act = {}) {
    Buf dg = alloc(n), du = alloc(n);
    ref::gate_bwd(act, da, g, u, dg.data(), du.data(), n);
    return {owned(std::move(dg)), owned(std::move(du))};
  }
  // FP8_STATIC's activation QDQ of operand x (kernels/ref/act_qdq_ref.h); the backward returns dL/ds.
  Operand act_qdq_operand(const Operand& x, T s, int64_t n) {
    Buf y = alloc(n);
    ref::act_qdq_fwd(x.x, s, y.data(), n);
    return owned(std::move(y));
  }
  T act_qdq_bwd(const T* x, T s, const T* dq, T* dx, bool acc, int64_t rows, int64_t dim) {
    return ref::act_qdq_bwd(x, s, dq, dx, acc, rows * dim);
  }
  void linear_fwd(const Operand& x, const T* W, const T* b, T* y, int64_t n, int64_t in, int64_t out) {
    ref::linear_fwd(x.x, W, b, y, n, in, out);
  }
  // dW += dy^T x (acc_dW) or dW = dy^T x.
  void linear_bwd(const Operand& dy, const Operand& x, const T* W, T* dx, bool acc, T* dW, bool acc_dW, T* db,
                  int64_t n, int64_t in, int64_t out) {
    if (dW && !acc_dW) std::fill(dW, dW + out * in, T(0));
    ref::linear_bwd(dy.x, x.x, W, dx, acc, dW, db, n, in, out);
  }
  void rmsnorm_fwd(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t dim, double eps) {
    ref::rmsnorm_fwd(x, w, y, rstd, rows, dim, eps);
  }
  void rmsnorm_bwd(const T* dy, const T* x, const T* w, const T* rstd, T* dx, bool acc, T* dw, int64_t rows,
                   int64_t dim) {
    ref::rmsnorm_bwd(dy, x, w, rstd, dx, acc, dw, rows, dim);
  }
  void rope_fwd(T* x, const int32_t* pos, const T* c, const T* s, int64_t rows, int64_t heads, const RopeDims& d) {
    ref::rope_fwd(x, pos, c, s, rows, heads, d);
  }
  void rope_bwd(T* x, const int32_t* pos, const T* c, const T* s, int64_t rows, int64_t heads, const RopeDims& d) {
    ref::rope_bwd(x, pos, c, s, rows, heads, d);
  }
  void attention_fwd(const AttnShape& sh, const T* q, const T* k, const T* v, const uint8_t* m, T* o, T* lse,
                     const T* sinks = nullptr) {
    ref::attention_fwd(sh, q, k, v, m, o, lse, sinks);
  }
  void attention_sink_grad(const AttnShape& sh, const T* sinks, const T* o, const T* lse, const T* dout, T* dsinks) {
    ref::attention_sink_grad(sh, sinks, o, lse, dout, dsinks);
  }
  void attention_bwd(const AttnShape& sh, const T* q, const T* k, const T* v, const uint8_t* m, const T* o,
                     const T* lse, const T* dout, T* dq, T* dk, T* dv) {
    ref::attention_bwd(sh, q, k, v, m, o, lse, dout, dq, dk, dv);
  }
  void add(const T* a, const T* b, T* y, int64_t n) { ref::add(a, b, y, n); }
  void output_gate_fwd(const T* o, const T* g, T* y, int64_t n) { ref::output_gate_fwd(o, g, y, n); }
  void output_gate_bwd(const T* dy, const T* o, const T* g, T* d_o, T* dg, int64_t n) {
    ref::output_gate_bwd(dy, o, g, d_o, dg, n);
  }

  // Gated DeltaNet (kernels/ref/delta_net_ref.h, gated_delta_ref.h); weight gradients accumulate where
  // non-null. gated_delta_fwd returns what its backward reads besides the inputs (here: nothing).
  void conv_silu_fwd(const T* x, const T* w, T* y, T* z, int64_t B, int64_t Tn, int64_t C, int64_t K) {
    ref::causal_conv_silu_fwd(x, w, y, z, B, Tn, C, K);
  }
  void conv_silu_bwd(const T* dy, const T* z, const T* x, const T* w, T* dx, T* dw, int64_t B, int64_t Tn, int64_t C,
                     int64_t K) {
    ref::causal_conv_silu_bwd(dy, z, x, w, dx, dw, B, Tn, C, K);
  }
  void l2norm_fwd(const T* x, T* y, int64_t rows, int64_t dim, T scale) { ref::l2norm_fwd(x, y, rows, dim, scale); }
  void l2norm_bwd(const T* dy, const T* x, T* dx, int64_t rows, int64_t dim, T scale) {
    ref::l2norm_bwd(dy, x, dx, rows, dim, scale);
  }
  void gated_rmsnorm_fwd(const T* x, const T* z, const T* w, T* y, int64_t rows, int64_t dim, double eps) {
    ref::gated_rmsnorm_fwd(x, z, w, y, rows, dim, eps);
  }
  void gated_rmsnorm_bwd(const T* dy, const T* x, const T* z, const T* w, T* dx, T* dz, T* dw, int64_t rows, int64_t dim,
                         double eps) {
    ref::gated_rmsnorm_bwd(dy, x, z, w, dx, dz, dw, rows, dim, eps);
  }
  void decay_beta_fwd(const T* a, const T* b, const T* A_log, const T* dt_bias, T* g, T* beta, int64_t rows, int64_t H) {
    ref::decay_beta_fwd(a, b, A_log, dt_bias, g, beta, rows, H);
  }
  void decay_beta_bwd(const T* dg, const T* dbeta, const T* a, const T* b, const T* A_log, const T* dt_bias, T* da, T* db,
                      T* dA_log, T* ddt_bias, int64_t rows, int64_t H) {
    ref::decay_beta_bwd(dg, dbeta, a, b, A_log, dt_bias, da, db, dA_log, ddt_bias, rows, H);
  }
  Buf gated_delta_fwd(const DeltaShape& sh, const T* q, const T* k, const T* v, const T* g, const T* beta, T* o) {
    ref::gated_delta_fwd(sh, q, k, v, g, beta, o);
    return {};
  }
  void gated_delta_bwd(const DeltaShape& sh, const T* dO, const T* q, const T* k, const T* v, const T* g, const T* beta,
                       const Buf&, T* dq, T* dk, T* dv, T* dg, T* dbeta) {
    ref::gated_delta_bwd(sh, dO, q, k, v, g, beta, dq, dk, dv, dg, dbeta);
  }

 private:
  static Operand owned(Buf b) {
    Operand o;
    o.own = std::move(b);
    o.x = o.own.data();
    return o;
  }
};

}  // namespace ar::ref
