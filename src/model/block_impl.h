// Decoder block (Llama family: Llama, Mistral, Qwen2 bias, Qwen3 q/k norm), forward and backward,
// written once over an op-table policy (kernels/ref/ref_ops.h in double for the tests,
// kernels/cpu/cpu_ops.h in fp32 for the engine). Shapes, with N = B*T tokens:
//   h1 = rmsnorm(x, ln1)                                    [N, C]
//   q = h1 Wq^T + bq [N, H*D];  k, v = h1 Wk^T + bk, h1 Wv^T + bv  [N, Hkv*D]
//   (Qwen3) q, k = rmsnorm per head over D with q_norm, k_norm
//   q, k = rope(q, k);  o = attention(q, k, v, causal + key mask)   [N, H*D]
//   x1 = x + o Wo^T (+ bo);  h2 = rmsnorm(x1, ln2)
//   a = silu(h2 Wg^T) * (h2 Wu^T)  [N, I];   y = x1 + a Wd^T
//   or, in a mixture-of-experts block (BlockDims::moe), y = x1 + MoeFfn(h2) (model/moe_ffn.h)
// Backward walks the same graph in reverse; weight gradients accumulate into the Grad pointers
// that are non-null (so a caller can ask for input gradients only).
// FP8_STATIC (ActQdq): a Linear with a static activation scale reads the QDQ of its input
// (kernels/ref/act_qdq_ref.h) instead of the input; its input gradient goes back through that QDQ,
// and backward adds dL/ds per Linear (a MoE block's experts: model/moe_ffn.h).
#pragma once
#include <cstdint>
#include <span>

#include "core/error.h"
#include "kernels/ref/attention_ref.h"
#include "model/act_qdq_linear.h"
#include "model/block_dims.h"
#include "model/moe_ffn.h"

namespace ar {

// Inputs shared by every block of a batch: rope tables [maxpos, D/2], positions [N], key mask [B, T].
template <class R>
struct BlockAux {
  int64_t B = 0, T = 0;
  const int32_t* pos = nullptr;
  const R* cos = nullptr;
  const R* sin = nullptr;
  const uint8_t* key_mask = nullptr;  // may be null: all keys valid
};

template <class Ops>
class BlockRunner {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;

  // Activations kept from forward for backward.
  struct Cache {
    const T* x = nullptr;
    Buf rstd1, q, k, v, qpre, kpre, rstdq, rstdk, o, lse, x1, rstd2, g, u;
    // The Linears' inputs in their GEMM operand form: h1 = rmsnorm(x), o, h2 = rmsnorm(x1), a = swiglu.
    typename Ops::Operand h1o, oo, h2o, ao;
    // With activation QDQ: the scales, and the QDQ operand each quantized Linear read.
    const ActQdq<T>* act = nullptr;
    typename Ops::Operand xq[7];  // q, k, v, o and the dense MLP's (a MoE block's experts: MoeFfn's cache)
    Buf h2;  // MoE: h2 in fp32 (the router and the experts' row gathers read it)
    typename MoeFfn<Ops>::Cache moe;
  };

  // Keys/values of earlier positions for incremental decoding (batch 1): [capacity, Hkv*D] each.
  struct KvCache {
    Buf k, v;
    int64_t len = 0, capacity = 0;
  };
  KvCache make_kv_cache(int64_t capacity) {
    return {ops_.alloc(capacity * d_.Hkv * d_.D), ops_.alloc(capacity * d_.Hkv * d_.D), 0, capacity};
  }

  BlockRunner(Ops& ops, const BlockDims& d) : ops_(ops), d_(d) {}

  // With `kv` (batch 1, no key mask): the T new tokens sit at positions kv->len.. (aux.pos must say
  // so), attend to the cached keys too, and are appended to the cache. Backward needs kv == null.
  void forward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, const T* x, T* y, Cache& c,
               KvCache* kv = nullptr, const ActQdq<T>* act = nullptr) {
    if (!forward_to_experts(w, aux, x, y, c, kv, act)) return;
    typename MoeFfn<Ops>::Cache* one = &c.moe;
    moe().run_experts(w, std::span(&one, 1));
    forward_from_experts(w, aux, y, c);
  }

  // A MoE block's forward and backward in stages around its routed experts, for a caller that runs the
  // experts of several batches in one pass (the tuner's leaves: MoeFfn::run_experts / expert_grads over
  // their caches' `moe`). forward = forward_to_experts, run_experts, forward_from_experts; backward =
  // backward_to_experts, expert_grads, backward_from_experts. The bits are forward's and backward's.
  MoeFfn<Ops> moe() { return MoeFfn<Ops>(ops_, d_); }

  // Attention, and in a MoE block the routing (true: the experts and forward_from_experts remain); a
  // dense block's whole forward (false).
  bool forward_to_experts(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, const T* x, T* y, Cache& c,
                          KvCache* kv = nullptr, const ActQdq<T>* act = nullptr) {
    const int64_t N = aux.B * aux.T, C = d_.C, QD = d_.H * d_.D, KD = d_.Hkv * d_.D, I = d_.I;
    if constexpr (requires { Ops::device_memory; })  // MoeFfn's routing reads its buffers on the host
      if (d_.is_moe()) fail(ErrorKind::Unsupported, "a mixture-of-experts block does not run on a device yet");
    c.x = x;
    c.act = act;
    c.rstd1 = ops_.alloc(N);
    c.h1o = ops_.rmsnorm_operand(x, w.ln1, p(c.rstd1), N, C, d_.eps);
    c.q = ops_.alloc(N * QD); c.k = ops_.alloc(N * KD); c.v = ops_.alloc(N * KD);
    ops_.linear_fwd(input(c, 0, c.h1o, N * C), w.wq, w.bq, p(c.q), N, C, QD);
    ops_.linear_fwd(input(c, 1, c.h1o, N * C), w.wk, w.bk, p(c.k), N, C, KD);
    ops_.linear_fwd(input(c, 2, c.h1o, N * C), w.wv, w.bv, p(c.v), N, C, KD);
    if (d_.qk_norm) {
      c.qpre = ops_.alloc(N * QD); c.kpre = ops_.alloc(N * KD);
      c.rstdq = ops_.alloc(N * d_.H); c.rstdk = ops_.alloc(N * d_.Hkv);
      ops_.copy(p(c.q), p(c.qpre), N * QD);
      ops_.copy(p(c.k), p(c.kpre), N * KD);
      ops_.rmsnorm_fwd(p(c.qpre), w.q_norm, p(c.q), p(c.rstdq), N * d_.H, d_.D, d_.eps);
      ops_.rmsnorm_fwd(p(c.kpre), w.k_norm, p(c.k), p(c.rstdk), N * d_.Hkv, d_.D, d_.eps);
    }
    ops_.rope_fwd(p(c.q), aux.pos, aux.cos, aux.sin, N, d_.H, d_.D);
    ops_.rope_fwd(p(c.k), aux.pos, aux.cos, aux.sin, N, d_.Hkv, d_.D);
    c.o = ops_.alloc(N * QD); c.lse = ops_.alloc(aux.B * d_.H * aux.T);
    if (kv) {
      ops_.copy(p(c.k), p(kv->k) + kv->len * KD, N * KD);
      ops_.copy(p(c.v), p(kv->v) + kv->len * KD, N * KD);
      kv->len += N;
      ops_.attention_fwd({1, N, kv->len, d_.H, d_.Hkv, d_.D}, p(c.q), p(kv->k), p(kv->v), nullptr, p(c.o),
                         p(c.lse));
    } else {
      ops_.attention_fwd(shape(aux), p(c.q), p(c.k), p(c.v), aux.key_mask, p(c.o), p(c.lse));
    }
    c.x1 = ops_.alloc(N * C);
    c.oo = ops_.operand(p(c.o), N * QD);
    ops_.linear_fwd(input(c, 3, c.oo, N * QD), w.wo, w.bo, p(c.x1), N, QD, C);
    ops_.add(x, p(c.x1), p(c.x1), N * C);
    c.rstd2 = ops_.alloc(N);
    if (d_.is_moe()) {
      c.h2 = ops_.alloc(N * C);
      ops_.rmsnorm_fwd(p(c.x1), w.ln2, p(c.h2), p(c.rstd2), N, C, d_.eps);
      c.h2o = ops_.operand(p(c.h2), N * C);
      moe().route(w, c.h2o, N, c.moe, act);
      return true;
    }
    c.h2o = ops_.rmsnorm_operand(p(c.x1), w.ln2, p(c.rstd2), N, C, d_.eps);
    c.g = ops_.alloc(N * I); c.u = ops_.alloc(N * I);
    ops_.linear_fwd(input(c, 4, c.h2o, N * C), w.wg, nullptr, p(c.g), N, C, I);
    ops_.linear_fwd(input(c, 5, c.h2o, N * C), w.wu, nullptr, p(c.u), N, C, I);
    c.ao = ops_.swiglu_operand(p(c.g), p(c.u), N * I);
    ops_.linear_fwd(input(c, 6, c.ao, N * I), w.wd, nullptr, y, N, I, C);
    ops_.add(p(c.x1), y, y, N * C);
    return false;
  }
  // A MoE block's output y [N, C] once its experts ran: their combination (and the shared expert), plus
  // the residual.
  void forward_from_experts(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, T* y, Cache& c) {
    const int64_t N = aux.B * aux.T;
    moe().combine(w, N, y, c.moe);
    ops_.add(p(c.x1), y, y, N * d_.C);
  }

  // dx (may alias nothing else) receives dL/dx; gradients accumulate into non-null entries of g, or
  // with accumulate = false the Linears' weight gradients are written (the others still accumulate).
  // dx = null (and no ln1 gradient) skips the input-gradient GEMMs of q/k/v (tuning needs none) unless
  // they have activation QDQ. dscale (an entry per linear_slot, may be null) accumulates dL/ds of the
  // Linears' QDQ.
  void backward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, Cache& c, const T* dy, T* dx,
                const BlockPtrs<T*>& g, bool accumulate = true, T* dscale = nullptr) {
    if (d_.is_moe()) {
      backward_to_experts(aux, c, dy);
      typename MoeFfn<Ops>::Cache* one = &c.moe;
      moe().expert_grads(w, std::span(&one, 1), g, accumulate, dscale);
    }
    backward_from_experts(w, aux, c, dy, dx, g, accumulate, dscale);
  }
  // A MoE block's gradients at its experts' outputs (MoeFfn::output_grads), from dy = dL/dy.
  void backward_to_experts(const BlockAux<T>& aux, Cache& c, const T* dy) {
    moe().output_grads(aux.B * aux.T, dy, c.moe);
  }
  // The rest of backward: a dense block's whole backward; a MoE block's once its experts' gradients are in.
  void backward_from_experts(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, Cache& c, const T* dy, T* dx,
                             const BlockPtrs<T*>& g, bool accumulate = true, T* dscale = nullptr) {
    const bool acc = accumulate;
    auto lin = [&](int slot, const typename Ops::Operand& dY, const typename Ops::Operand& X, const T* W, T* dX,
                   bool acc_dx, T* dW, T* db, int64_t in, int64_t out) {
      linear_bwd(c, slot, dY, X, W, dX, acc_dx, dW, acc, db, aux.B * aux.T, in, out, dscale);
    };
    const int64_t N = aux.B * aux.T, C = d_.C, QD = d_.H * d_.D, KD = d_.Hkv * d_.D, I = d_.I;
    Buf dx1 = ops_.alloc(N * C);
    ops_.copy(dy, p(dx1), N * C);
    {  // MLP
      Buf dh2 = ops_.alloc(N * C);
      if (d_.is_moe()) {
        moe().input_grad(w, N, dy, p(dh2), g, acc, c.moe, dscale);
      } else {
        Buf da = ops_.alloc(N * I);
        lin(6, ops_.operand(dy, N * C), c.ao, w.wd, p(da), false, g.wd, nullptr, I, C);
        const auto [dg, du] = ops_.swiglu_bwd_operands(p(da), p(c.g), p(c.u), N * I);
        lin(4, dg, c.h2o, w.wg, p(dh2), false, g.wg, nullptr, C, I);
        lin(5, du, c.h2o, w.wu, p(dh2), true, g.wu, nullptr, C, I);
      }
      ops_.rmsnorm_bwd(p(dh2), p(c.x1), w.ln2, p(c.rstd2), p(dx1), true, g.ln2, N, C);
    }
    // Attention
    Buf dob = ops_.alloc(N * QD), dq = ops_.alloc(N * QD), dk = ops_.alloc(N * KD), dv = ops_.alloc(N * KD);
    lin(3, ops_.operand(p(dx1), N * C), c.oo, w.wo, p(dob), false, g.wo, g.bo, QD, C);
    ops_.attention_bwd(shape(aux), p(c.q), p(c.k), p(c.v), aux.key_mask, p(c.o), p(c.lse), p(dob), p(dq), p(dk),
                       p(dv));
    ops_.rope_bwd(p(dq), aux.pos, aux.cos, aux.sin, N, d_.H, d_.D);
    ops_.rope_bwd(p(dk), aux.pos, aux.cos, aux.sin, N, d_.Hkv, d_.D);
    if (d_.qk_norm) {  // dq/dk are w.r.t. normed q/k; map back to the projections
      Buf dqp = ops_.alloc(N * QD), dkp = ops_.alloc(N * KD);
      ops_.rmsnorm_bwd(p(dq), p(c.qpre), w.q_norm, p(c.rstdq), p(dqp), false, g.q_norm, N * d_.H, d_.D);
      ops_.rmsnorm_bwd(p(dk), p(c.kpre), w.k_norm, p(c.rstdk), p(dkp), false, g.k_norm, N * d_.Hkv, d_.D);
      ops_.copy(p(dqp), p(dq), N * QD);
      ops_.copy(p(dkp), p(dk), N * KD);
    }
    const bool need_dx = dx || g.ln1;
    Buf dh1 = ops_.alloc(need_dx ? N * C : 1);
    T* dh = need_dx ? p(dh1) : nullptr;
    lin(0, ops_.operand(p(dq), N * QD), c.h1o, w.wq, dh, false, g.wq, g.bq, C, QD);
    lin(1, ops_.operand(p(dk), N * KD), c.h1o, w.wk, dh, true, g.wk, g.bk, C, KD);
    lin(2, ops_.operand(p(dv), N * KD), c.h1o, w.wv, dh, true, g.wv, g.bv, C, KD);
    if (!need_dx) return;
    Buf scratch = ops_.alloc(dx ? 1 : N * C);
    if (!dx) dx = p(scratch);  // only ln1's gradient wanted
    ops_.copy(p(dx1), dx, N * C);
    ops_.rmsnorm_bwd(p(dh1), c.x, w.ln1, p(c.rstd1), dx, true, g.ln1, N, C);
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  T scale(const Cache& c, int slot) const { return c.act ? c.act->at(size_t(slot)) : T(0); }
  // The operand Linear `slot` reads: x, or its activation QDQ (kept in the cache for backward).
  const typename Ops::Operand& input(Cache& c, int slot, const typename Ops::Operand& x, int64_t n) {
    return act_qdq_input(ops_, scale(c, slot), x, c.xq[slot], n);
  }
  // A Linear's backward from its output gradient dy; x is the input before any activation QDQ.
  void linear_bwd(Cache& c, int slot, const typename Ops::Operand& dy, const typename Ops::Operand& x, const T* W,
                  T* dx, bool acc_dx, T* dW, bool acc_dW, T* db, int64_t n, int64_t in, int64_t out, T* dscale) {
    act_qdq_linear_bwd(ops_, scale(c, slot), size_t(slot), dy, x, c.xq[slot], W, dx, acc_dx, dW, acc_dW, db, n, in,
                       out, dscale);
  }
  ref::AttnShape shape(const BlockAux<T>& aux) const { return {aux.B, aux.T, aux.T, d_.H, d_.Hkv, d_.D}; }

  Ops& ops_;
  BlockDims d_;
};

}  // namespace ar
