// Decoder block = a norm placement + an attention module + a feed-forward module, forward and backward,
// written once over an op-table policy (kernels/ref/ref_ops.h in double for the tests,
// kernels/cpu/cpu_ops.h in fp32 for the engine, kernels/cuda/cuda_ops.h). Pre-norm, with N = B*T tokens:
//   h1 = rmsnorm(x, ln1);  x1 = x + Attention(h1)        [N, C]
//   Attention: grouped-query (model/attention_gqa.h), multi-head latent (model/attention_mla.h) or Gated
//   DeltaNet's linear attention (model/attention_delta.h; host backends only)
//   h2 = rmsnorm(x1, ln2); y = x1 + FeedForward(h2)      [N, C]
//   With sandwich norms (BlockDims::sandwich, Gemma) each module's output is normed before its residual
//   add: x1 = x + rmsnorm(Attention(h1), ln_post_attn), y = x1 + rmsnorm(FeedForward(h2), ln_post_ffn).
//   FeedForward: the gated MLP (model/ffn_mlp.h) or, in a mixture-of-experts block (BlockDims::moe),
//   MoeFfn (model/moe_ffn.h)
// Backward walks the same graph in reverse; weight gradients accumulate into the Grad pointers
// that are non-null (so a caller can ask for input gradients only).
// FP8_STATIC (ActQdq): a Linear with a static activation scale reads the QDQ of its input
// (kernels/ref/act_qdq_ref.h) instead of the input; its input gradient goes back through that QDQ,
// and backward adds dL/ds per Linear (by linear_slot, each module for its own Linears).
#pragma once
#include <cstdint>
#include <span>

#include "core/error.h"
#include "model/act_qdq_linear.h"
#include "model/attention_delta.h"
#include "model/attention_gqa.h"
#include "model/attention_mla.h"
#include "model/block_dims.h"
#include "model/ffn_mlp.h"
#include "model/moe_ffn.h"

namespace ar {

template <class Ops>
class BlockRunner {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;

  // Activations kept from forward for backward.
  struct Cache {
    const T* x = nullptr;
    Buf rstd1, x1, rstd2;
    // The modules' inputs in their GEMM operand form: h1 = rmsnorm(x), h2 = rmsnorm(x1).
    typename Ops::Operand h1o, h2o;
    typename GqaAttention<Ops>::Cache attn;
    typename MlaAttention<Ops>::Cache mla;
    typename DeltaNetAttention<Ops>::Cache delta;
    typename GatedMlp<Ops>::Cache mlp;
    Buf h2;  // MoE: h2 in fp32 (the router and the experts' row gathers read it)
    typename MoeFfn<Ops>::Cache moe;
    Buf attn_out, rstd_pa, ffn_out, rstd_pf;  // sandwich norms: the modules' outputs and their norms' rstd
  };

  using KvCache = AttnKvCache<Ops>;
  KvCache make_kv_cache(int64_t capacity) {
    if constexpr (!on_device()) {
      if (d_.attn == AttnKind::Mla) return MlaAttention<Ops>(ops_, d_).make_kv_cache(capacity);
      if (d_.attn == AttnKind::DeltaNet) return DeltaNetAttention<Ops>(ops_, d_).make_kv_cache();
    }
    return GqaAttention<Ops>(ops_, d_).make_kv_cache(capacity);
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
    const int64_t N = aux.B * aux.T, C = d_.C;
    if constexpr (on_device()) {  // MoeFfn's routing reads its buffers on the host
      if (d_.is_moe()) fail(ErrorKind::Unsupported, "a mixture-of-experts block does not run on a device yet");
      if (d_.attn == AttnKind::Mla) fail(ErrorKind::Unsupported, "multi-head latent attention does not run on a device yet");
      if (d_.attn == AttnKind::DeltaNet) fail(ErrorKind::Unsupported, "Gated DeltaNet does not run on a device yet");
    }
    if (d_.sandwich && d_.is_moe()) fail(ErrorKind::Unsupported, "sandwich norms around a mixture-of-experts feed-forward");
    c.x = x;
    c.rstd1 = ops_.alloc(N);
    c.h1o = ops_.rmsnorm_operand(x, w.ln1, p(c.rstd1), N, C, d_.eps);
    c.x1 = ops_.alloc(N * C);
    if (d_.sandwich) c.attn_out = ops_.alloc(N * C);
    T* a = d_.sandwich ? p(c.attn_out) : p(c.x1);
    if constexpr (!on_device()) {
      if (d_.attn == AttnKind::Mla) MlaAttention<Ops>(ops_, d_).forward(w, aux, c.h1o, a, c.mla, kv, act);
      if (d_.attn == AttnKind::DeltaNet) DeltaNetAttention<Ops>(ops_, d_).forward(w, aux, c.h1o, a, c.delta, act, kv);
    }
    if (d_.attn == AttnKind::Gqa) GqaAttention<Ops>(ops_, d_).forward(w, aux, c.h1o, a, c.attn, kv, act);
    if (d_.sandwich) post_norm_fwd(a, w.ln_post_attn, p(c.x1), c.rstd_pa, N);
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
    if (d_.sandwich) c.ffn_out = ops_.alloc(N * C);
    mlp().forward(w, c.h2o, N, d_.sandwich ? p(c.ffn_out) : y, c.mlp, act);
    if (d_.sandwich) post_norm_fwd(p(c.ffn_out), w.ln_post_ffn, y, c.rstd_pf, N);
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
    const int64_t N = aux.B * aux.T, C = d_.C;
    Buf dx1 = ops_.alloc(N * C);
    ops_.copy(dy, p(dx1), N * C);
    {  // feed-forward
      Buf dh2 = ops_.alloc(N * C), df;
      const T* dff = d_.sandwich ? post_norm_bwd(dy, p(c.ffn_out), w.ln_post_ffn, c.rstd_pf, g.ln_post_ffn, df, N) : dy;
      if (d_.is_moe())
        moe().input_grad(w, N, dff, p(dh2), g, accumulate, c.moe, dscale);
      else
        mlp().backward(w, c.mlp, c.h2o, N, dff, p(dh2), g, accumulate, dscale);
      ops_.rmsnorm_bwd(p(dh2), p(c.x1), w.ln2, p(c.rstd2), p(dx1), true, g.ln2, N, C);
    }
    const bool need_dx = dx || g.ln1;
    Buf dh1 = ops_.alloc(need_dx ? N * C : 1), da;
    T* dh = need_dx ? p(dh1) : nullptr;
    const T* dattn = d_.sandwich ? post_norm_bwd(p(dx1), p(c.attn_out), w.ln_post_attn, c.rstd_pa, g.ln_post_attn, da, N)
                                 : p(dx1);
    if constexpr (!on_device()) {
      if (d_.attn == AttnKind::Mla) MlaAttention<Ops>(ops_, d_).backward(w, aux, c.mla, c.h1o, dattn, dh, g, accumulate, dscale);
      if (d_.attn == AttnKind::DeltaNet)
        DeltaNetAttention<Ops>(ops_, d_).backward(w, aux, c.delta, c.h1o, dattn, dh, g, accumulate, dscale);
    }
    if (d_.attn == AttnKind::Gqa) GqaAttention<Ops>(ops_, d_).backward(w, aux, c.attn, c.h1o, dattn, dh, g, accumulate, dscale);
    if (!need_dx) return;
    Buf scratch = ops_.alloc(dx ? 1 : N * C);
    if (!dx) dx = p(scratch);  // only ln1's gradient wanted
    ops_.copy(p(dx1), dx, N * C);
    ops_.rmsnorm_bwd(p(dh1), c.x, w.ln1, p(c.rstd1), dx, true, g.ln1, N, C);
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  // A sandwich norm: out = rmsnorm(in, w) over N rows, its rstd kept; backward: the gradient at its input
  // (into `buf`) from dout, accumulating its weight's into gw when non-null.
  void post_norm_fwd(const T* in, const T* w, T* out, Buf& rstd, int64_t N) {
    rstd = ops_.alloc(N);
    ops_.rmsnorm_fwd(in, w, out, p(rstd), N, d_.C, d_.eps);
  }
  const T* post_norm_bwd(const T* dout, const T* in, const T* w, Buf& rstd, T* gw, Buf& buf, int64_t N) {
    buf = ops_.alloc(N * d_.C);
    ops_.rmsnorm_bwd(dout, in, w, p(rstd), p(buf), false, gw, N, d_.C);
    return p(buf);
  }
  static constexpr bool on_device() { return requires { Ops::device_memory; }; }
  GatedMlp<Ops> mlp() { return GatedMlp<Ops>(ops_, d_, d_.attn_linears()); }

  Ops& ops_;
  BlockDims d_;
};

}  // namespace ar
