// The gated MLP, a decoder block's dense feed-forward module (model/block_impl.h). With h the block's
// normed input [N, C]:  a = silu(h Wg^T) * (h Wu^T) [N, I] (or BlockDims::act's gate);  out = a Wd^T [N, C].
// Its Linears are the block's linear_slot first..first+2 (gate, up, down); with FP8_STATIC each reads the
// QDQ of its input (act_qdq_linear.h). Backward: dh [N, C] written, weight gradients into the non-null
// entries of g.
#pragma once
#include <cstdint>

#include "model/act_qdq_linear.h"
#include "model/block_dims.h"

namespace ar {

template <class Ops>
class GatedMlp {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;
  using Operand = typename Ops::Operand;

  struct Cache {
    Buf g, u;
    Operand ao;     // silu(g) * u as the GEMM operand Wd reads
    Operand xq[3];  // with activation QDQ: the operand gate, up and down each read
    const ActQdq<T>* act = nullptr;
  };

  // `first`: the linear_slot of the gate projection.
  GatedMlp(Ops& ops, const BlockDims& d, size_t first) : ops_(ops), d_(d), first_(first) {}

  // out [N, C] written.
  void forward(const BlockPtrs<const T*>& w, const Operand& h, int64_t N, T* out, Cache& c, const ActQdq<T>* act) {
    const int64_t C = d_.C, I = d_.I;
    c.act = act;
    c.g = ops_.alloc(N * I); c.u = ops_.alloc(N * I);
    ops_.linear_fwd(input(c, 0, h, N * C), w.wg, nullptr, p(c.g), N, C, I);
    ops_.linear_fwd(input(c, 1, h, N * C), w.wu, nullptr, p(c.u), N, C, I);
    c.ao = ops_.swiglu_operand(p(c.g), p(c.u), N * I, d_.act);
    ops_.linear_fwd(input(c, 2, c.ao, N * I), w.wd, nullptr, out, N, I, C);
  }

  // dh [N, C] written from dout = dL/dout; h is forward's input operand. dscale (by linear_slot, may be
  // null) accumulates dL/ds.
  void backward(const BlockPtrs<const T*>& w, Cache& c, const Operand& h, int64_t N, const T* dout, T* dh,
                const BlockPtrs<T*>& g, bool acc, T* dscale) {
    const int64_t C = d_.C, I = d_.I;
    auto lin = [&](int i, const Operand& dY, const Operand& X, const T* W, T* dX, bool acc_dx, T* dW, int64_t in,
                   int64_t out) {
      act_qdq_linear_bwd(ops_, scale(c, i), first_ + size_t(i), dY, X, c.xq[i], W, dX, acc_dx, dW, acc,
                         static_cast<T*>(nullptr), N, in, out, dscale);
    };
    Buf da = ops_.alloc(N * I);
    lin(2, ops_.operand(dout, N * C), c.ao, w.wd, p(da), false, g.wd, I, C);
    const auto [dg, du] = ops_.swiglu_bwd_operands(p(da), p(c.g), p(c.u), N * I, d_.act);
    lin(0, dg, h, w.wg, dh, false, g.wg, C, I);
    lin(1, du, h, w.wu, dh, true, g.wu, C, I);
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  T scale(const Cache& c, int i) const { return c.act ? c.act->at(first_ + size_t(i)) : T(0); }
  const Operand& input(Cache& c, int i, const Operand& x, int64_t n) {
    return act_qdq_input(ops_, scale(c, i), x, c.xq[i], n);
  }

  Ops& ops_;
  BlockDims d_;
  size_t first_;
};

}  // namespace ar
