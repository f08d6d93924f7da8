// Gated DeltaNet's linear attention, a decoder block's attention module (model/block_impl.h): the linear
// layers of Qwen3-Next and Qwen3.5 (transformers' Qwen3NextGatedDeltaNet). With h the block's normed input
// [N, C] (a padded token's row zeroed, as transformers' apply_mask_to_padding_states does), Hk key heads
// of Dk, Hv = G Hk value heads of Dv (DeltaDims):
//   qkvz = h Wqkvz^T [N, Hk (2 Dk + 2 G Dv)], per key head [q Dk | k Dk | v G Dv | z G Dv];
//   ba = h Wba^T [N, 2 Hv], per key head [b G | a G]
//   (Qwen3.5, DeltaDims::split: [q | k | v] = h Wqkv^T in the conv's order, z = h Wz^T, b = h Wb^T, a = h Wa^T)
//   [q, k, v] = silu(causal depthwise conv of K taps over the sequence, per channel)
//   q = l2norm(q) Dk^-1/2, k = l2norm(k) per head; g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
//   o = gated delta rule(q, k, v, g, beta) [N, Hv Dv]            (kernels/ref/gated_delta_ref.h)
//   out = gated_rmsnorm(o, z, norm) Wo^T, the norm per value head (w rmsnorm(o) silu(z))
// Its quantized Linears are the block's linear_slot 0 and 1 (in_proj_qkvz, out_proj; split: 0..2,
// in_proj_qkv, in_proj_z, out_proj); in_proj_ba (in_proj_b, in_proj_a) stays in 16 bit (its 2 Hv rows:
// vLLM's fused in_proj_ba is refused by the Marlin int4 kernels below 64 rows per tensor-parallel shard), so
// it reads h itself, never an activation QDQ. Backward walks the graph in reverse: the Linears' weight
// gradients, and in_proj_ba's, the conv kernel's, A_log's, dt_bias' and the norm weight's into the non-null
// entries of g; dh = null skips the input projections' input-gradient GEMMs.
// Incremental decoding (batch 1, no key mask) carries the conv's last K - 1 inputs and each value head's
// recurrent state between calls (AttnKvCache's k [K - 1, conv_dim] and v [Hv, Dk, Dv]); the new tokens'
// delta rule runs the sequential reference recurrence from that state (kernels/ref/gated_delta_ref.h, in
// the policy's precision: a token's Hv Dk Dv multiply-adds).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/ref/gated_delta_ref.h"
#include "model/act_qdq_linear.h"
#include "model/attention_gqa.h"
#include "model/block_dims.h"

namespace ar {

template <class Ops>
class DeltaNetAttention {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;
  using Operand = typename Ops::Operand;

  struct Cache {
    Buf hm;                  // h with padded rows zeroed (with a key mask)
    Buf mixed, zc;           // the conv's input [N, conv_dim] and pre-activation
    Buf qraw, kraw, q, k, v;  // q, k before and after l2norm; v [N, value_dim]
    Buf z, a, b, g, beta, o, saved, normed;
    Operand hm_op, no;  // hm as an operand; the norm's output as out_proj reads it
    Operand xq[3];    // with activation QDQ: the operand each quantized Linear read
    const ActQdq<T>* act = nullptr;
  };

  using KvCache = AttnKvCache<Ops>;
  KvCache make_kv_cache() {
    KvCache c{ops_.alloc((s_.K - 1) * s_.conv_dim()), ops_.alloc(s_.Hv * s_.Dk * s_.Dv), 0, 0};
    ops_.zero(p(c.k), (s_.K - 1) * s_.conv_dim());
    ops_.zero(p(c.v), s_.Hv * s_.Dk * s_.Dv);
    return c;
  }

  DeltaNetAttention(Ops& ops, const BlockDims& d) : ops_(ops), d_(d), s_(d.delta) {
    if (s_.Hk <= 0 || s_.Hv % s_.Hk != 0 || s_.K <= 0)
      fail(ErrorKind::Internal, "DeltaNetAttention: value heads must be a multiple of the key heads");
  }

  // out [N, C] (written) = gated_rmsnorm(o, z) Wo^T. With `kv` (batch 1, no key mask) the T new tokens
  // continue the cached sequence and the cache moves past them.
  void forward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, const Operand& h, T* out, Cache& c,
               const ActQdq<T>* act, KvCache* kv = nullptr) {
    const int64_t N = aux.B * aux.T, C = d_.C, VD = s_.value_dim();
    c.act = act;
    project(w, masked_input(aux, h, c), c, N);
    Buf conv = ops_.alloc(N * s_.conv_dim());
    c.zc = ops_.alloc(N * s_.conv_dim());
    if (kv) conv_after(p(c.mixed), w.conv, p(conv), N, *kv);
    else ops_.conv_silu_fwd(p(c.mixed), w.conv, p(conv), p(c.zc), aux.B, aux.T, s_.conv_dim(), s_.K);
    c.qraw = ops_.alloc(N * s_.key_dim());
    c.kraw = ops_.alloc(N * s_.key_dim());
    c.v = ops_.alloc(N * VD);
    ops_.copy_cols(p(conv), s_.conv_dim(), p(c.qraw), s_.key_dim(), N, s_.key_dim());
    ops_.copy_cols(p(conv) + s_.key_dim(), s_.conv_dim(), p(c.kraw), s_.key_dim(), N, s_.key_dim());
    ops_.copy_cols(p(conv) + 2 * s_.key_dim(), s_.conv_dim(), p(c.v), VD, N, VD);
    c.q = ops_.alloc(N * s_.key_dim());
    c.k = ops_.alloc(N * s_.key_dim());
    ops_.l2norm_fwd(p(c.qraw), p(c.q), N * s_.Hk, s_.Dk, q_scale());
    ops_.l2norm_fwd(p(c.kraw), p(c.k), N * s_.Hk, s_.Dk, T(1));
    c.g = ops_.alloc(N * s_.Hv);
    c.beta = ops_.alloc(N * s_.Hv);
    ops_.decay_beta_fwd(p(c.a), p(c.b), w.A_log, w.dt_bias, p(c.g), p(c.beta), N, s_.Hv);
    c.o = ops_.alloc(N * VD);
    if (kv) {  // from the cached state, which then holds the last token's
      ref::gated_delta_fwd(shape(aux), p(c.q), p(c.k), p(c.v), p(c.g), p(c.beta), p(c.o), p(kv->v), p(kv->v));
      kv->len += N;
    } else {
      c.saved = ops_.gated_delta_fwd(shape(aux), p(c.q), p(c.k), p(c.v), p(c.g), p(c.beta), p(c.o));
    }
    c.normed = ops_.alloc(N * VD);
    ops_.gated_rmsnorm_fwd(p(c.o), p(c.z), w.dnorm, p(c.normed), N * s_.Hv, s_.Dv, d_.eps);
    c.no = ops_.operand(p(c.normed), N * VD);
    ops_.linear_fwd(input(c, out_slot(), c.no, N * VD), w.wo, nullptr, out, N, VD, C);
  }

  // From dout = dL/dout [N, C]: dh [N, C] written (may be null), gradients as documented above; h is
  // forward's input operand. dscale (by linear_slot, may be null) accumulates dL/ds.
  void backward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, Cache& c, const Operand& h, const T* dout, T* dh,
                const BlockPtrs<T*>& g, bool acc, T* dscale) {
    const Operand& hin = aux.key_mask ? c.hm_op : h;
    const int64_t N = aux.B * aux.T, C = d_.C, VD = s_.value_dim(), KD = s_.key_dim(), CD = s_.conv_dim();
    T* const no_bias = nullptr;
    auto lin = [&](int slot, const Operand& dY, const Operand& X, const T* W, T* dX, bool acc_dx, T* dW, int64_t in,
                   int64_t out) {
      act_qdq_linear_bwd(ops_, scale(c, slot), size_t(slot), dY, X, c.xq[slot], W, dX, acc_dx, dW, acc, no_bias, N, in,
                         out, dscale);
    };
    Buf dn = ops_.alloc(N * VD), dO = ops_.alloc(N * VD), dz = ops_.alloc(N * VD);
    lin(out_slot(), ops_.operand(dout, N * C), c.no, w.wo, p(dn), false, g.wo, VD, C);
    ops_.gated_rmsnorm_bwd(p(dn), p(c.o), p(c.z), w.dnorm, p(dO), p(dz), g.dnorm, N * s_.Hv, s_.Dv, d_.eps);
    Buf dq = ops_.alloc(N * KD), dk = ops_.alloc(N * KD), dv = ops_.alloc(N * VD), dg = ops_.alloc(N * s_.Hv),
        dbeta = ops_.alloc(N * s_.Hv);
    ops_.gated_delta_bwd(shape(aux), p(dO), p(c.q), p(c.k), p(c.v), p(c.g), p(c.beta), c.saved, p(dq), p(dk), p(dv),
                         p(dg), p(dbeta));
    Buf dconv = ops_.alloc(N * CD), dpre = ops_.alloc(N * KD);
    ops_.l2norm_bwd(p(dq), p(c.qraw), p(dpre), N * s_.Hk, s_.Dk, q_scale());
    ops_.copy_cols(p(dpre), KD, p(dconv), CD, N, KD);
    ops_.l2norm_bwd(p(dk), p(c.kraw), p(dpre), N * s_.Hk, s_.Dk, T(1));
    ops_.copy_cols(p(dpre), KD, p(dconv) + KD, CD, N, KD);
    ops_.copy_cols(p(dv), VD, p(dconv) + 2 * KD, CD, N, VD);
    Buf dmixed = ops_.alloc(N * CD), da = ops_.alloc(N * s_.Hv), db = ops_.alloc(N * s_.Hv);
    ops_.conv_silu_bwd(p(dconv), p(c.zc), p(c.mixed), w.conv, p(dmixed), g.conv, aux.B, aux.T, CD, s_.K);
    ops_.decay_beta_bwd(p(dg), p(dbeta), p(c.a), p(c.b), w.A_log, w.dt_bias, p(da), p(db), g.A_log, g.dt_bias, N,
                        s_.Hv);
    project_bwd(w, hin, p(dmixed), p(dz), p(db), p(da), dh, g, acc, lin, N);
    if (dh && aux.key_mask)
      for (int64_t r = 0; r < N; ++r)
        if (!aux.key_mask[r]) ops_.zero(dh + r * C, C);
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  static T scale(const Cache& c, int slot) { return c.act ? c.act->at(size_t(slot)) : T(0); }
  const Operand& input(Cache& c, int slot, const Operand& x, int64_t n) {
    return act_qdq_input(ops_, scale(c, slot), x, c.xq[slot], n);
  }
  int64_t group() const { return s_.Hv / s_.Hk; }
  int64_t head_width() const { return 2 * s_.Dk + 2 * group() * s_.Dv; }
  int64_t qkvz_width() const { return s_.Hk * head_width(); }
  T q_scale() const { return T(1) / std::sqrt(T(s_.Dk)); }
  ref::DeltaShape shape(const BlockAux<T>& aux) const { return {aux.B, aux.T, s_.Hk, s_.Hv, s_.Dk, s_.Dv}; }

  int out_slot() const { return s_.split ? 2 : 1; }

  // The input projections of hin [N, C]: the conv's input c.mixed [N, conv_dim], z [N, Hv Dv], b and a
  // [N, Hv] (Qwen3-Next's fused tensors split per key head, or Qwen3.5's four); in_proj_ba / in_proj_b and
  // in_proj_a read hin itself (16 bit, no activation QDQ).
  void project(const BlockPtrs<const T*>& w, const Operand& hin, Cache& c, int64_t N) {
    const int64_t C = d_.C, VD = s_.value_dim(), Hv = s_.Hv;
    c.mixed = ops_.alloc(N * s_.conv_dim());
    c.z = ops_.alloc(N * VD);
    c.a = ops_.alloc(N * Hv);
    c.b = ops_.alloc(N * Hv);
    if (s_.split) {
      ops_.linear_fwd(input(c, 0, hin, N * C), w.in_qkvz, nullptr, p(c.mixed), N, C, s_.conv_dim());
      ops_.linear_fwd(input(c, 1, hin, N * C), w.in_z, nullptr, p(c.z), N, C, VD);
      ops_.linear_fwd(hin, w.in_b, nullptr, p(c.b), N, C, Hv);
      ops_.linear_fwd(hin, w.in_a, nullptr, p(c.a), N, C, Hv);
      return;
    }
    Buf qkvz = ops_.alloc(N * qkvz_width()), ba = ops_.alloc(N * 2 * Hv);
    ops_.linear_fwd(input(c, 0, hin, N * C), w.in_qkvz, nullptr, p(qkvz), N, C, qkvz_width());
    ops_.linear_fwd(hin, w.in_ba, nullptr, p(ba), N, C, 2 * Hv);
    split(p(qkvz), p(ba), p(c.mixed), p(c.z), p(c.b), p(c.a), N, false);
  }
  // project's backward from the gradients at its outputs: dh (may be null) written by the first product,
  // added to by the others; the weights' gradients into g's non-null entries.
  template <class Lin>
  void project_bwd(const BlockPtrs<const T*>& w, const Operand& hin, T* dmixed, T* dz, T* db, T* da, T* dh,
                   const BlockPtrs<T*>& g, bool acc, Lin& lin, int64_t N) {
    const int64_t C = d_.C, VD = s_.value_dim(), Hv = s_.Hv;
    T* const no_bias = nullptr;
    if (s_.split) {
      lin(0, ops_.operand(dmixed, N * s_.conv_dim()), hin, w.in_qkvz, dh, false, g.in_qkvz, C, s_.conv_dim());
      lin(1, ops_.operand(dz, N * VD), hin, w.in_z, dh, true, g.in_z, C, VD);
      ops_.linear_bwd(ops_.operand(db, N * Hv), hin, w.in_b, dh, true, g.in_b, acc, no_bias, N, C, Hv);
      ops_.linear_bwd(ops_.operand(da, N * Hv), hin, w.in_a, dh, true, g.in_a, acc, no_bias, N, C, Hv);
      return;
    }
    Buf dqkvz = ops_.alloc(N * qkvz_width()), dba = ops_.alloc(N * 2 * Hv);
    split(p(dqkvz), p(dba), dmixed, dz, db, da, N, true);
    lin(0, ops_.operand(p(dqkvz), N * qkvz_width()), hin, w.in_qkvz, dh, false, g.in_qkvz, C, qkvz_width());
    ops_.linear_bwd(ops_.operand(p(dba), N * 2 * Hv), hin, w.in_ba, dh, true, g.in_ba, acc, no_bias, N, C, 2 * Hv);
  }

  // The causal conv of n new rows of `mixed` [n, conv_dim] after the cached K - 1 inputs, into y [n,
  // conv_dim]; the cache then holds the last K - 1 inputs.
  void conv_after(const T* mixed, const T* wconv, T* y, int64_t n, KvCache& kv) {
    const int64_t CD = s_.conv_dim(), tail = s_.K - 1;
    Buf ext = ops_.alloc((tail + n) * CD), out = ops_.alloc((tail + n) * CD), pre = ops_.alloc((tail + n) * CD);
    ops_.copy(p(kv.k), p(ext), tail * CD);
    ops_.copy(mixed, p(ext) + tail * CD, n * CD);
    ops_.conv_silu_fwd(p(ext), wconv, p(out), p(pre), 1, tail + n, CD, s_.K);
    ops_.copy(p(out) + tail * CD, y, n * CD);
    ops_.copy(p(ext) + n * CD, p(kv.k), tail * CD);
  }

  // h, or its copy with the rows of padded tokens zeroed (kept in the cache).
  const Operand& masked_input(const BlockAux<T>& aux, const Operand& h, Cache& c) {
    const int64_t N = aux.B * aux.T, C = d_.C;
    if (!aux.key_mask) return h;
    c.hm = ops_.alloc(N * C);
    ops_.copy(h.x, p(c.hm), N * C);
    for (int64_t r = 0; r < N; ++r)
      if (!aux.key_mask[r]) ops_.zero(p(c.hm) + r * C, C);
    c.hm_op = ops_.operand(p(c.hm), N * C);
    return c.hm_op;
  }

  // The projections' per-key-head layout <-> the conv's [q | k | v], z [N, Hv Dv], b and a [N, Hv]; `back`:
  // from the latter into the former (the gradients).
  void split(T* qkvz, T* ba, T* mixed, T* z, T* b, T* a, int64_t N, bool back) {
    const int64_t G = group(), W = qkvz_width(), KD = s_.key_dim(), CD = s_.conv_dim(), VD = s_.value_dim();
    auto move = [&](T* packed, int64_t pstride, T* plain, int64_t stride, int64_t cols) {
      if (back) ops_.copy_cols(plain, stride, packed, pstride, N, cols);
      else ops_.copy_cols(packed, pstride, plain, stride, N, cols);
    };
    for (int64_t hk = 0; hk < s_.Hk; ++hk) {
      T* head = qkvz + hk * head_width();
      move(head, W, mixed + hk * s_.Dk, CD, s_.Dk);
      move(head + s_.Dk, W, mixed + KD + hk * s_.Dk, CD, s_.Dk);
      move(head + 2 * s_.Dk, W, mixed + 2 * KD + hk * G * s_.Dv, CD, G * s_.Dv);
      move(head + 2 * s_.Dk + G * s_.Dv, W, z + hk * G * s_.Dv, VD, G * s_.Dv);
      move(ba + hk * 2 * G, 2 * s_.Hv, b + hk * G, s_.Hv, G);
      move(ba + hk * 2 * G + G, 2 * s_.Hv, a + hk * G, s_.Hv, G);
    }
  }

  Ops& ops_;
  BlockDims d_;
  DeltaDims s_;
};

}  // namespace ar
