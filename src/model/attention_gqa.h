// Grouped-query attention, a decoder block's attention module (model/block_impl.h): Llama, Mistral, Qwen2
// (q/k/v biases), Qwen3 (q/k norm), Mixtral, the Qwen MoE families. With h = the block's normed input
// [N, C] and N = B*T tokens:
//   q = h Wq^T + bq [N, H*D];  k, v = h Wk^T + bk, h Wv^T + bv  [N, Hkv*D]
//   (output gate, Qwen3-Next: BlockDims::out_gate) h Wq^T [N, H*2D] holds each head's query and gate,
//   [q D | gate D] per head
//   (q/k norm) q, k = rmsnorm per head over D with q_norm, k_norm
//   q, k = rope(q, k) (partial RoPE: each head's first BlockDims::rope dims, GLM-4.5)
//   o = attention(q, k, v, causal + key mask [+ sliding window: BlockDims::window] [+ sinks: gpt-oss's
//       per-head logit in the softmax's denominator])   [N, H*D];   (output gate) o = o sigmoid(gate)
//   out = o Wo^T (+ bo)
// Its Linears are the block's linear_slot 0..3 (q, k, v, o); with FP8_STATIC each reads the QDQ of its
// input (act_qdq_linear.h). Backward walks the graph in reverse, weight gradients into the non-null
// entries of g; dh = null skips the q/k/v input-gradient GEMMs (tuning needs none) unless they have
// activation QDQ.
#pragma once
#include <cstdint>

#include "kernels/ref/attention_ref.h"
#include "kernels/ref/rope_ref.h"
#include "model/act_qdq_linear.h"
#include "model/block_dims.h"

namespace ar {

// Inputs shared by every block of a batch: rope tables [maxpos, rotated dims / 2], positions [N], key
// mask [B, T].
template <class R>
struct BlockAux {
  int64_t B = 0, T = 0;
  const int32_t* pos = nullptr;
  const R* cos = nullptr;
  const R* sin = nullptr;
  const uint8_t* key_mask = nullptr;  // may be null: all keys valid
};

// Keys/values of earlier positions for incremental decoding (batch 1), as the attention kernels read them.
template <class Ops>
struct AttnKvCache {
  typename Ops::Buf k, v;
  int64_t len = 0, capacity = 0;
};

template <class Ops>
class GqaAttention {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;
  using Operand = typename Ops::Operand;

  struct Cache {
    Buf q, k, v, qpre, kpre, rstdq, rstdk, o, lse;
    Buf gate, og;   // the output gate [N, H*D] and o times its sigmoid (BlockDims::out_gate)
    Operand oo;     // o as the GEMM operand Wo reads
    Operand xq[4];  // with activation QDQ: the operand q, k, v and o each read
    const ActQdq<T>* act = nullptr;
  };
  using KvCache = AttnKvCache<Ops>;  // [capacity, Hkv*D] each
  KvCache make_kv_cache(int64_t capacity) {
    return {ops_.alloc(capacity * d_.Hkv * d_.D), ops_.alloc(capacity * d_.Hkv * d_.D), 0, capacity};
  }

  GqaAttention(Ops& ops, const BlockDims& d) : ops_(ops), d_(d) {}

  // out [N, C] (written) = o Wo^T (+ bo). With `kv` (batch 1, no key mask): the T new tokens sit at
  // positions kv->len.. (aux.pos must say so), attend to the cached keys too, and are appended.
  void forward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, const Operand& h, T* out, Cache& c,
               KvCache* kv, const ActQdq<T>* act) {
    const int64_t N = aux.B * aux.T, C = d_.C, QD = d_.H * d_.D, KD = d_.Hkv * d_.D;
    c.act = act;
    c.q = ops_.alloc(N * QD); c.k = ops_.alloc(N * KD); c.v = ops_.alloc(N * KD);
    if (d_.out_gate) {  // [q | gate] per head, split
      Buf qg = ops_.alloc(2 * N * QD);
      c.gate = ops_.alloc(N * QD);
      ops_.linear_fwd(input(c, 0, h, N * C), w.wq, w.bq, p(qg), N, C, 2 * QD);
      ops_.copy_cols(p(qg), 2 * d_.D, p(c.q), d_.D, N * d_.H, d_.D);
      ops_.copy_cols(p(qg) + d_.D, 2 * d_.D, p(c.gate), d_.D, N * d_.H, d_.D);
    } else {
      ops_.linear_fwd(input(c, 0, h, N * C), w.wq, w.bq, p(c.q), N, C, QD);
    }
    ops_.linear_fwd(input(c, 1, h, N * C), w.wk, w.bk, p(c.k), N, C, KD);
    ops_.linear_fwd(input(c, 2, h, N * C), w.wv, w.bv, p(c.v), N, C, KD);
    if (d_.qk_norm) {
      c.qpre = ops_.alloc(N * QD); c.kpre = ops_.alloc(N * KD);
      c.rstdq = ops_.alloc(N * d_.H); c.rstdk = ops_.alloc(N * d_.Hkv);
      ops_.copy(p(c.q), p(c.qpre), N * QD);
      ops_.copy(p(c.k), p(c.kpre), N * KD);
      ops_.rmsnorm_fwd(p(c.qpre), w.q_norm, p(c.q), p(c.rstdq), N * d_.H, d_.D, d_.eps);
      ops_.rmsnorm_fwd(p(c.kpre), w.k_norm, p(c.k), p(c.rstdk), N * d_.Hkv, d_.D, d_.eps);
    }
    ops_.rope_fwd(p(c.q), aux.pos, aux.cos, aux.sin, N, d_.H, rope());
    ops_.rope_fwd(p(c.k), aux.pos, aux.cos, aux.sin, N, d_.Hkv, rope());
    c.o = ops_.alloc(N * QD); c.lse = ops_.alloc(aux.B * d_.H * aux.T);
    if (kv) {
      ops_.copy(p(c.k), p(kv->k) + kv->len * KD, N * KD);
      ops_.copy(p(c.v), p(kv->v) + kv->len * KD, N * KD);
      kv->len += N;
      ref::AttnShape sh{1, N, kv->len, d_.H, d_.Hkv, d_.D};
      sh.scale = d_.scale;
      sh.window = d_.window;
      ops_.attention_fwd(sh, p(c.q), p(kv->k), p(kv->v), nullptr, p(c.o), p(c.lse), sinks(w));
    } else {
      ops_.attention_fwd(shape(aux), p(c.q), p(c.k), p(c.v), aux.key_mask, p(c.o), p(c.lse), sinks(w));
    }
    if (d_.out_gate) {
      c.og = ops_.alloc(N * QD);
      ops_.output_gate_fwd(p(c.o), p(c.gate), p(c.og), N * QD);
    }
    c.oo = ops_.operand(p(d_.out_gate ? c.og : c.o), N * QD);
    ops_.linear_fwd(input(c, 3, c.oo, N * QD), w.wo, w.bo, out, N, QD, C);
  }

  // From dout = dL/dout [N, C]: dh [N, C] written (may be null), weight gradients as documented above;
  // h is forward's input operand. dscale (by linear_slot, may be null) accumulates dL/ds.
  void backward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, Cache& c, const Operand& h, const T* dout,
                T* dh, const BlockPtrs<T*>& g, bool acc, T* dscale) {
    const int64_t N = aux.B * aux.T, C = d_.C, QD = d_.H * d_.D, KD = d_.Hkv * d_.D;
    auto lin = [&](int slot, const Operand& dY, const Operand& X, const T* W, T* dX, bool acc_dx, T* dW, T* db,
                   int64_t in, int64_t out) {
      act_qdq_linear_bwd(ops_, scale(c, slot), size_t(slot), dY, X, c.xq[slot], W, dX, acc_dx, dW, acc, db, N, in,
                         out, dscale);
    };
    Buf dob = ops_.alloc(N * QD), dq = ops_.alloc(N * QD), dk = ops_.alloc(N * KD), dv = ops_.alloc(N * KD);
    lin(3, ops_.operand(dout, N * C), c.oo, w.wo, p(dob), false, g.wo, g.bo, QD, C);
    Buf dgate;
    if (d_.out_gate) {  // dob becomes dL/do
      Buf dog = std::move(dob);
      dob = ops_.alloc(N * QD);
      dgate = ops_.alloc(N * QD);
      ops_.output_gate_bwd(p(dog), p(c.o), p(c.gate), p(dob), p(dgate), N * QD);
    }
    ops_.attention_bwd(shape(aux), p(c.q), p(c.k), p(c.v), aux.key_mask, p(c.o), p(c.lse), p(dob), p(dq), p(dk),
                       p(dv));
    if (g.sinks && d_.sinks) {  // accumulates, as the other non-Linear gradients do
      Buf ds = ops_.alloc(d_.H);
      ops_.attention_sink_grad(shape(aux), w.sinks, p(c.o), p(c.lse), p(dob), p(ds));
      ops_.add(g.sinks, p(ds), g.sinks, d_.H);
    }
    ops_.rope_bwd(p(dq), aux.pos, aux.cos, aux.sin, N, d_.H, rope());
    ops_.rope_bwd(p(dk), aux.pos, aux.cos, aux.sin, N, d_.Hkv, rope());
    if (d_.qk_norm) {  // dq/dk are w.r.t. normed q/k; map back to the projections
      Buf dqp = ops_.alloc(N * QD), dkp = ops_.alloc(N * KD);
      ops_.rmsnorm_bwd(p(dq), p(c.qpre), w.q_norm, p(c.rstdq), p(dqp), false, g.q_norm, N * d_.H, d_.D);
      ops_.rmsnorm_bwd(p(dk), p(c.kpre), w.k_norm, p(c.rstdk), p(dkp), false, g.k_norm, N * d_.Hkv, d_.D);
      ops_.copy(p(dqp), p(dq), N * QD);
      ops_.copy(p(dkp), p(dk), N * KD);
    }
    if (d_.out_gate) {  // back into the projection's [q | gate] per head
      Buf dqg = ops_.alloc(2 * N * QD);
      ops_.copy_cols(p(dq), d_.D, p(dqg), 2 * d_.D, N * d_.H, d_.D);
      ops_.copy_cols(p(dgate), d_.D, p(dqg) + d_.D, 2 * d_.D, N * d_.H, d_.D);
      lin(0, ops_.operand(p(dqg), 2 * N * QD), h, w.wq, dh, false, g.wq, g.bq, C, 2 * QD);
    } else {
      lin(0, ops_.operand(p(dq), N * QD), h, w.wq, dh, false, g.wq, g.bq, C, QD);
    }
    lin(1, ops_.operand(p(dk), N * KD), h, w.wk, dh, true, g.wk, g.bk, C, KD);
    lin(2, ops_.operand(p(dv), N * KD), h, w.wv, dh, true, g.wv, g.bv, C, KD);
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  static T scale(const Cache& c, int slot) { return c.act ? c.act->at(size_t(slot)) : T(0); }
  // The operand Linear `slot` reads: x, or its activation QDQ (kept in the cache for backward).
  const Operand& input(Cache& c, int slot, const Operand& x, int64_t n) {
    return act_qdq_input(ops_, scale(c, slot), x, c.xq[slot], n);
  }
  RopeDims rope() const { return {d_.D, 0, d_.rope ? d_.rope : d_.D, false}; }
  ref::AttnShape shape(const BlockAux<T>& aux) const {
    ref::AttnShape sh{aux.B, aux.T, aux.T, d_.H, d_.Hkv, d_.D};
    sh.scale = d_.scale;
    sh.window = d_.window;
    return sh;
  }
  const T* sinks(const BlockPtrs<const T*>& w) const { return d_.sinks ? w.sinks : nullptr; }

  Ops& ops_;
  BlockDims d_;
};

}  // namespace ar
