// The op-table policy of the generic decoder block (model/block_impl.h) on one GPU: BlockRunner<CudaOps>
// runs a dense block's forward and backward with every buffer on the device (weights, activations,
// rope tables, positions and key mask are device pointers). GEMMs on cuBLASLt (kernels/cuda/gemm.h),
// everything else on block_kernels.h, in fp32. With `amp` (--amp), every operand also carries its bf16
// copy, and a GEMM takes bf16 operands with fp32 accumulation where each of its operands has one: an
// activation always, a weight when bound to its bf16 copy (`bind`: the tuner binds each tuned Linear's
// QDQ output, written in bf16 by the QDQ forward); an unbound weight keeps the GEMM in fp32. Norms,
// attention, the loss and every output stay fp32. Not yet: FP8_STATIC's activation QDQ,
// mixture-of-experts feed-forwards (their routing reads buffers on the host), the deferred-gradient
// tree; each is refused with an error naming it.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/gemm.h"

namespace ar::cuda {

struct CudaOps {
  using Real = float;
  using Buf = DeviceArray<float>;
  static constexpr bool device_memory = true;  // BlockRunner refuses what reads buffers on the host
  explicit CudaOps(DeviceContext& c, bool with_amp = false) : ctx(c), amp(with_amp) {}
  DeviceContext& ctx;
  bool amp = false;

  Buf alloc(int64_t n) { return ctx.alloc<float>(n > 0 ? n : 1); }
  static float* ptr(Buf& b) { return b.data(); }
  void copy(const float* src, float* dst, int64_t n) {
    check(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream()), ctx.index(),
          "device copy");
  }
  // `cols` elements of each of `rows` rows, between row strides (a column block of a matrix).
  void copy_cols(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    check(cudaMemcpy2DAsync(dst, size_t(dst_stride) * sizeof(float), src, size_t(src_stride) * sizeof(float),
                            size_t(cols) * sizeof(float), size_t(rows), cudaMemcpyDeviceToDevice, ctx.stream()),
          ctx.index(), "device 2D copy");
  }
  void zero(float* dst, int64_t n) {
    check(cudaMemsetAsync(dst, 0, size_t(n) * sizeof(float), ctx.stream()), ctx.index(), "device fill");
  }

  void bind(const float* W, const uint16_t* W16) { bf16_[W] = W16; }

  struct Operand {
    const float* x = nullptr;
    const uint16_t* x16 = nullptr;  // amp: the bf16 copy
    Buf own;
    DeviceArray<uint16_t> own16;
  };
  Operand operand(const float* x, int64_t n) {
    Operand o{x, nullptr, {}, {}};
    with_bf16(o, n);
    return o;
  }
  Operand rmsnorm_operand(const float* x, const float* w, float* rstd, int64_t rows, int64_t dim, double eps) {
    Buf y = alloc(rows * dim);
    cuda::rmsnorm_fwd(ctx, x, w, y.data(), rstd, rows, dim, eps);
    return owned(std::move(y), rows * dim);
  }
  Operand swiglu_operand(const float* g, const float* u, int64_t n, const GateAct& act = {}) {
    Buf a = alloc(n);
    cuda::swiglu_fwd(ctx, g, u, a.data(), n, act);
    return owned(std::move(a), n);
  }
  std::pair<Operand, Operand> swiglu_bwd_operands(const float* da, const float* g, const float* u, int64_t n,
                                                  const GateAct& act = {}) {
    Buf dg = alloc(n), du = alloc(n);
    cuda::swiglu_bwd(ctx, da, g, u, dg.data(), du.data(), n, act);
    return {owned(std::move(dg), n), owned(std::move(du), n)};
  }
  Operand act_qdq_operand(const Operand&, float, int64_t) { unsupported("FP8_STATIC's activation QDQ"); }
  float act_qdq_bwd(const float*, float, const float*, float*, bool, int64_t, int64_t) {
    unsupported("FP8_STATIC's activation QDQ");
  }
  void linear_fwd(const Operand& x, const float* W, const float* b, float* y, int64_t n, int64_t in, int64_t out) {
    if (const uint16_t* W16 = bf16_of(W); W16 && x.x16)
      cuda::linear_fwd(ctx, GemmType::BF16, x.x16, W16, y, n, in, out);
    else
      cuda::linear_fwd(ctx, GemmType::F32, x.x, W, y, n, in, out);
    if (b) add_bias(ctx, b, y, n, out);
  }
  // dW += dy^T x (acc_dW) or dW = dy^T x; db += column sums of dy.
  void linear_bwd(const Operand& dy, const Operand& x, const float* W, float* dx, bool acc, float* dW, bool acc_dW,
                  float* db, int64_t n, int64_t in, int64_t out) {
    if (dx) {
      if (const uint16_t* W16 = bf16_of(W); W16 && dy.x16)
        cuda::linear_dx(ctx, GemmType::BF16, dy.x16, W16, dx, n, in, out, acc);
      else
        cuda::linear_dx(ctx, GemmType::F32, dy.x, W, dx, n, in, out, acc);
    }
    if (dW) {
      if (dy.x16 && x.x16)
        cuda::linear_dw(ctx, GemmType::BF16, dy.x16, x.x16, dW, n, in, out, acc_dW);
      else
        cuda::linear_dw(ctx, GemmType::F32, dy.x, x.x, dW, n, in, out, acc_dW);
    }
    if (db) bias_grad(ctx, dy.x, db, n, out);
  }
  void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, double eps) {
    cuda::rmsnorm_fwd(ctx, x, w, y, rstd, rows, dim, eps);
  }
  void rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, float* dx, bool acc, float* dw,
                   int64_t rows, int64_t dim) {
    cuda::rmsnorm_bwd(ctx, dy, x, w, rstd, dx, acc, dw, rows, dim);
  }
  void rope_fwd(float* x, const int32_t* pos, const float* c, const float* s, int64_t rows, int64_t heads,
                const RopeDims& d) {
    rope(ctx, x, pos, c, s, rows, heads, d, false);
  }
  void rope_bwd(float* x, const int32_t* pos, const float* c, const float* s, int64_t rows, int64_t heads,
                const RopeDims& d) {
    rope(ctx, x, pos, c, s, rows, heads, d, true);
  }
  void attention_fwd(const ref::AttnShape& sh, const float* q, const float* k, const float* v, const uint8_t* m,
                     float* o, float* lse, const float* sinks = nullptr) {
    if (sinks) unsupported("attention sinks (gpt-oss)");
    cuda::attention_fwd(ctx, sh, q, k, v, m, o, lse);
  }
  void attention_sink_grad(const ref::AttnShape&, const float*, const float*, const float*, const float*, float*) {
    unsupported("attention sinks (gpt-oss)");
  }
  void attention_bwd(const ref::AttnShape& sh, const float* q, const float* k, const float* v, const uint8_t* m,
                     const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
    Buf delta = alloc(sh.B * sh.H * sh.Tq);
    cuda::attention_bwd(ctx, sh, q, k, v, m, o, lse, dout, delta.data(), dq, dk, dv);
  }
  void add(const float* a, const float* b, float* y, int64_t n) { cuda::add(ctx, a, b, y, n); }
  void output_gate_fwd(const float* o, const float* g, float* y, int64_t n) { cuda::output_gate_fwd(ctx, o, g, y, n); }
  void output_gate_bwd(const float* dy, const float* o, const float* g, float* d_o, float* dg, int64_t n) {
    cuda::output_gate_bwd(ctx, dy, o, g, d_o, dg, n);
  }

 private:
  Operand owned(Buf b, int64_t n) {
    Operand o;
    o.own = std::move(b);
    o.x = o.own.data();
    with_bf16(o, n);
    return o;
  }
  void with_bf16(Operand& o, int64_t n) {
    if (!amp) return;
    o.own16 = ctx.alloc<uint16_t>(n > 0 ? n : 1);
    to_bf16(ctx, o.x, o.own16.data(), n);
    o.x16 = o.own16.data();
  }
  const uint16_t* bf16_of(const float* W) const {
    if (!amp) return nullptr;
    auto it = bf16_.find(W);
    return it == bf16_.end() ? nullptr : it->second;
  }
  std::unordered_map<const float*, const uint16_t*> bf16_;  // the bound weights' bf16 copies
  [[noreturn]] void unsupported(const char* what) {
    fail(ErrorKind::Unsupported, ctx.name() + ": " + what + " does not run on the CUDA backend yet");
  }
};

}  // namespace ar::cuda
