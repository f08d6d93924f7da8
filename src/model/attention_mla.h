// Multi-head latent attention, a decoder block's attention module (model/block_impl.h): DeepSeek-V2/V3/R1,
// Kimi K2 (transformers' DeepseekV3Attention). With h the block's normed input [N, C], H heads, a query/key
// head Dq = nope + rope wide and a value head v wide (MlaDims):
//   q = rmsnorm(h Wqa^T, q_a_norm) Wqb^T  (q_lora > 0)   or   q = h Wq^T              [N, H*Dq]
//   [l, kr] = h Wkva^T  [N, kv_lora + rope];   kv = rmsnorm(l, kv_a_norm) Wkvb^T     [N, H*(nope + v)]
//   head j: Q = [q_nope, rope(q_rot)],  K = [kv_nope, rope(kr)] (one RoPE key shared by every head),
//           V = kv's v part;   o = attention(Q, K, V, causal + key mask, scale)          [N, H*v]
//   out = o Wo^T (+ bo)
// RoPE rotates the last `rope` dims of each query head and kr, interleaved pairs with rope_interleave
// (kernels/ref/rope_ref.h). Attention runs on heads of width Dq with V zero-padded from v to Dq (what
// transformers does for flash attention), so the attention kernels need no second head width; the padded
// columns of o are dropped. Its Linears are the block's linear_slot 0.. in the order q_a, q_b, kv_a, kv_b, o
// (q, kv_a, kv_b, o without q_lora). Backward: K's gradient of the shared key is summed over the heads;
// dh = null skips the input gradient of the Linears that read h.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "kernels/ref/attention_ref.h"
#include "model/act_qdq_linear.h"
#include "model/attention_gqa.h"
#include "model/block_dims.h"

namespace ar {

template <class Ops>
class MlaAttention {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;
  using Operand = typename Ops::Operand;

  struct Cache {
    Buf qa, rstd_qa, q, ckv, lat, rstd_lat, kv, k, v, o, lse, o_v;  // o_v: o without the padding [N, H*v]
    Operand qan, latn, ov;  // the operands q_b, kv_b and o_proj read
    Operand xq[5];          // with activation QDQ: the operand each Linear read
    const ActQdq<T>* act = nullptr;
  };
  using KvCache = AttnKvCache<Ops>;
  // The expanded keys and values of earlier positions (batch 1): [capacity, H*Dq] each.
  KvCache make_kv_cache(int64_t capacity) {
    return {ops_.alloc(capacity * qd()), ops_.alloc(capacity * qd()), 0, capacity};
  }

  MlaAttention(Ops& ops, const BlockDims& d) : ops_(ops), d_(d), m_(d.mla) {
    if (m_.v > dq() || m_.rope % 2 != 0 || m_.kv_lora <= 0)
      fail(ErrorKind::Internal, "MlaAttention: v_head_dim must not exceed the query head, rope dims must be even");
  }

  // out [N, C] (written) = o Wo^T (+ bo). With `kv` (batch 1, no key mask) as GqaAttention's.
  void forward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, const Operand& h, T* out, Cache& c,
               KvCache* kv, const ActQdq<T>* act) {
    const int64_t N = aux.B * aux.T, C = d_.C, H = d_.H, L = m_.kv_lora, R = m_.rope, A = L + R;
    c.act = act;
    c.q = ops_.alloc(N * qd());
    if (m_.q_lora > 0) {
      c.qa = ops_.alloc(N * m_.q_lora);
      c.rstd_qa = ops_.alloc(N);
      ops_.linear_fwd(input(c, slot_q(), h, N * C), w.q_a, nullptr, p(c.qa), N, C, m_.q_lora);
      c.qan = ops_.rmsnorm_operand(p(c.qa), w.q_a_norm, p(c.rstd_qa), N, m_.q_lora, d_.eps);
      ops_.linear_fwd(input(c, slot_q() + 1, c.qan, N * m_.q_lora), w.q_b, nullptr, p(c.q), N, m_.q_lora, qd());
    } else {
      ops_.linear_fwd(input(c, slot_q(), h, N * C), w.wq, nullptr, p(c.q), N, C, qd());
    }
    c.ckv = ops_.alloc(N * A);
    ops_.linear_fwd(input(c, slot_kva(), h, N * C), w.kv_a, nullptr, p(c.ckv), N, C, A);
    c.lat = ops_.alloc(N * L);
    c.rstd_lat = ops_.alloc(N);
    ops_.copy_cols(p(c.ckv), A, p(c.lat), L, N, L);
    c.latn = ops_.rmsnorm_operand(p(c.lat), w.kv_a_norm, p(c.rstd_lat), N, L, d_.eps);
    c.kv = ops_.alloc(N * H * kvw());
    ops_.linear_fwd(input(c, slot_kva() + 1, c.latn, N * L), w.kv_b, nullptr, p(c.kv), N, L, H * kvw());
    Buf kr = ops_.alloc(N * R);
    ops_.copy_cols(p(c.ckv) + L, A, p(kr), R, N, R);
    ops_.rope_fwd(p(c.q), aux.pos, aux.cos, aux.sin, N, H, {dq(), m_.nope, R, m_.interleave});
    ops_.rope_fwd(p(kr), aux.pos, aux.cos, aux.sin, N, 1, {R, 0, R, m_.interleave});
    c.k = ops_.alloc(N * qd());
    c.v = ops_.alloc(N * qd());
    ops_.zero(p(c.v), N * qd());
    for (int64_t j = 0; j < H; ++j) {
      ops_.copy_cols(p(c.kv) + j * kvw(), H * kvw(), p(c.k) + j * dq(), qd(), N, m_.nope);
      ops_.copy_cols(p(kr), R, p(c.k) + j * dq() + m_.nope, qd(), N, R);
      ops_.copy_cols(p(c.kv) + j * kvw() + m_.nope, H * kvw(), p(c.v) + j * dq(), qd(), N, m_.v);
    }
    c.o = ops_.alloc(N * qd());
    c.lse = ops_.alloc(aux.B * H * aux.T);
    if (kv) {
      ops_.copy(p(c.k), p(kv->k) + kv->len * qd(), N * qd());
      ops_.copy(p(c.v), p(kv->v) + kv->len * qd(), N * qd());
      kv->len += N;
      ops_.attention_fwd({1, N, kv->len, H, H, dq(), scale()}, p(c.q), p(kv->k), p(kv->v), nullptr, p(c.o),
                         p(c.lse));
    } else {
      ops_.attention_fwd(shape(aux), p(c.q), p(c.k), p(c.v), aux.key_mask, p(c.o), p(c.lse));
    }
    c.o_v = ops_.alloc(N * H * m_.v);
    for (int64_t j = 0; j < H; ++j) ops_.copy_cols(p(c.o) + j * dq(), qd(), p(c.o_v) + j * m_.v, H * m_.v, N, m_.v);
    c.ov = ops_.operand(p(c.o_v), N * H * m_.v);
    ops_.linear_fwd(input(c, slot_kva() + 2, c.ov, N * H * m_.v), w.wo, w.bo, out, N, H * m_.v, C);
  }

  // From dout = dL/dout [N, C]: dh [N, C] written (may be null), weight gradients into the non-null
  // entries of g; h is forward's input operand. dscale (by linear_slot, may be null) accumulates dL/ds.
  void backward(const BlockPtrs<const T*>& w, const BlockAux<T>& aux, Cache& c, const Operand& h, const T* dout,
                T* dh, const BlockPtrs<T*>& g, bool acc, T* dscale) {
    const int64_t N = aux.B * aux.T, C = d_.C, H = d_.H, L = m_.kv_lora, R = m_.rope, A = L + R;
    auto lin = [&](size_t slot, const Operand& dY, const Operand& X, const T* W, T* dX, bool acc_dx, T* dW, T* db,
                   int64_t in, int64_t out) {
      act_qdq_linear_bwd(ops_, scale_of(c, slot), slot, dY, X, c.xq[slot], W, dX, acc_dx, dW, acc, db, N, in, out,
                         dscale);
    };
    Buf dov = ops_.alloc(N * H * m_.v), dob = ops_.alloc(N * qd());
    lin(slot_kva() + 2, ops_.operand(dout, N * C), c.ov, w.wo, p(dov), false, g.wo, g.bo, H * m_.v, C);
    ops_.zero(p(dob), N * qd());
    for (int64_t j = 0; j < H; ++j) ops_.copy_cols(p(dov) + j * m_.v, H * m_.v, p(dob) + j * dq(), qd(), N, m_.v);
    Buf dQ = ops_.alloc(N * qd()), dk = ops_.alloc(N * qd()), dv = ops_.alloc(N * qd());
    ops_.attention_bwd(shape(aux), p(c.q), p(c.k), p(c.v), aux.key_mask, p(c.o), p(c.lse), p(dob), p(dQ), p(dk),
                       p(dv));
    // Back to the projections: kv's nope and v parts per head, the shared RoPE key summed over the heads.
    Buf dkv = ops_.alloc(N * H * kvw()), dkr = ops_.alloc(N * R);
    for (int64_t j = 0; j < H; ++j) {
      ops_.copy_cols(p(dk) + j * dq(), qd(), p(dkv) + j * kvw(), H * kvw(), N, m_.nope);
      ops_.copy_cols(p(dv) + j * dq(), qd(), p(dkv) + j * kvw() + m_.nope, H * kvw(), N, m_.v);
      if (j == 0) ops_.copy_cols(p(dk) + m_.nope, qd(), p(dkr), R, N, R);
      else ops_.add_cols(p(dk) + j * dq() + m_.nope, qd(), p(dkr), R, N, R);
    }
    ops_.rope_bwd(p(dQ), aux.pos, aux.cos, aux.sin, N, H, {dq(), m_.nope, R, m_.interleave});
    ops_.rope_bwd(p(dkr), aux.pos, aux.cos, aux.sin, N, 1, {R, 0, R, m_.interleave});
    Buf dlatn = ops_.alloc(N * L), dlat = ops_.alloc(N * L), dckv = ops_.alloc(N * A);
    lin(slot_kva() + 1, ops_.operand(p(dkv), N * H * kvw()), c.latn, w.kv_b, p(dlatn), false, g.kv_b, nullptr, L,
        H * kvw());
    ops_.rmsnorm_bwd(p(dlatn), p(c.lat), w.kv_a_norm, p(c.rstd_lat), p(dlat), false, g.kv_a_norm, N, L);
    ops_.copy_cols(p(dlat), L, p(dckv), A, N, L);
    ops_.copy_cols(p(dkr), R, p(dckv) + L, A, N, R);
    lin(slot_kva(), ops_.operand(p(dckv), N * A), h, w.kv_a, dh, false, g.kv_a, nullptr, C, A);
    if (m_.q_lora == 0)
      return lin(slot_q(), ops_.operand(p(dQ), N * qd()), h, w.wq, dh, true, g.wq, nullptr, C, qd());
    Buf dqan = ops_.alloc(N * m_.q_lora), dqa = ops_.alloc(N * m_.q_lora);
    lin(slot_q() + 1, ops_.operand(p(dQ), N * qd()), c.qan, w.q_b, p(dqan), false, g.q_b, nullptr, m_.q_lora,
        qd());
    ops_.rmsnorm_bwd(p(dqan), p(c.qa), w.q_a_norm, p(c.rstd_qa), p(dqa), false, g.q_a_norm, N, m_.q_lora);
    lin(slot_q(), ops_.operand(p(dqa), N * m_.q_lora), h, w.q_a, dh, true, g.q_a, nullptr, C, m_.q_lora);
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  int64_t dq() const { return m_.nope + m_.rope; }
  int64_t qd() const { return d_.H * dq(); }
  int64_t kvw() const { return m_.nope + m_.v; }  // a head's columns of kv_b's output
  static size_t slot_q() { return 0; }
  size_t slot_kva() const { return m_.q_lora > 0 ? 2 : 1; }
  double scale() const { return m_.scale; }  // 0: the attention's 1/sqrt(Dq)
  static T scale_of(const Cache& c, size_t slot) { return c.act ? c.act->at(slot) : T(0); }
  const Operand& input(Cache& c, size_t slot, const Operand& x, int64_t n) {
    return act_qdq_input(ops_, scale_of(c, slot), x, c.xq[slot], n);
  }
  ref::AttnShape shape(const BlockAux<T>& aux) const { return {aux.B, aux.T, aux.T, d_.H, d_.H, dq(), scale()}; }

  Ops& ops_;
  BlockDims d_;
  MlaDims m_;
};

}  // namespace ar
