// Causal GQA attention with a key padding mask. Layouts: q/o [B,Tq,H,D], k/v [B,Tk,Hkv,D], lse [B,H,Tq].
// GEMM operands fp32, or bf16 with fp32 accumulation (bf16: --amp, as autocast runs attention): Q, K,
// V, dO and the probabilities P and dS are rounded to bf16 as GEMM operands; softmax, lse, the row sums
// and every output and gradient stay fp32.
// The pool's threads take whole (batch, KV head) groups. A group's query heads are packed dense as one
// matrix [Tq * grp, D] (row (t, head)) and its K, V as [Tk, D], so every product is one dense GEMM
// (oneDNN's brgemm, not strided sub-matrices). Queries go in tiles of kTile positions: a tile's keys stop
// at its last query's last visible key, so the causal upper triangle is mostly never computed.
// Per tile: S = scale Q K^T, masked softmax rows, O = P V.
// Backward recomputes P from lse (nothing of size T^2 is kept between passes):
//   dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o)), dQ = scale dS K, dK += scale dS^T Q.
// Tiles, GEMM shapes and the order of the dK/dV sums depend on the shape only, never on the thread count.
// Reference: kernels/ref/attention_ref.h.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kTile = 128;  // query positions per tile

// Visible keys for query i are j in [0, last] with key_mask set (last < 0: none).
inline int64_t last_key(const AttnShape& s, int64_t i) { return std::min(s.Tk - 1, i + (s.Tk - s.Tq)); }

// A GEMM operand from fp32 values: a copy, or rounded to bf16.
void to_operand(const float* x, float* dst, int64_t n) { std::memcpy(dst, x, size_t(n) * 4); }
void to_operand(const float* x, uint16_t* dst, int64_t n) { fp32_to_bf16_serial(x, dst, n); }

// C = alpha op(A) op(B) + beta C on the calling thread, fp32 or bf16 operands.
void gemm_on(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_serial(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_on(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
             int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_bf16_serial(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
constexpr DType kOperand = sizeof(T) == 4 ? DType::F32 : DType::BF16;

// One (batch, KV head) group: where its rows live in the strided tensors, and its dense buffers.
struct Group {
  const AttnShape& s;
  int64_t b, kvh, grp, qs, ks;
  const uint8_t* mask;  // this batch row's key mask, or null

  Group(const AttnShape& shape, int64_t batch, int64_t kv_head, const uint8_t* key_mask)
      : s(shape), b(batch), kvh(kv_head), grp(shape.H / shape.Hkv), qs(shape.H * shape.D), ks(shape.Hkv * shape.D),
        mask(key_mask ? key_mask + batch * shape.Tk : nullptr) {}

  // Row (t, head g) of a [B,Tq,H,D] tensor; row t of a [B,Tk,Hkv,D] tensor.
  int64_t q_off(int64_t t) const { return (b * s.Tq + t) * qs + kvh * grp * s.D; }
  int64_t k_off(int64_t t) const { return (b * s.Tk + t) * ks + kvh * s.D; }
  int64_t head(int64_t r) const { return kvh * grp + r % grp; }  // query head of packed row r

  template <class T>
  void pack_q(const float* x, T* dense) const {
    for (int64_t t = 0; t < s.Tq; ++t) to_operand(x + q_off(t), dense + t * grp * s.D, grp * s.D);
  }
  void unpack_q(const float* dense, float* x) const {
    for (int64_t t = 0; t < s.Tq; ++t) std::memcpy(x + q_off(t), dense + t * grp * s.D, size_t(grp * s.D) * 4);
  }
  template <class T>
  void pack_k(const float* x, T* dense) const {
    for (int64_t t = 0; t < s.Tk; ++t) to_operand(x + k_off(t), dense + t * s.D, s.D);
  }
  void unpack_k(const float* dense, float* x) const {
    for (int64_t t = 0; t < s.Tk; ++t) std::memcpy(x + k_off(t), dense + t * s.D, size_t(s.D) * 4);
  }
};

// Query positions [i0, i1) of a tile, its packed rows and the keys [0, kend) it reads.
struct Tile {
  int64_t i0, i1, rows, kend;
};

Tile tile_at(const Group& g, int64_t i0) {
  const int64_t i1 = std::min(g.s.Tq, i0 + kTile);
  return {i0, i1, (i1 - i0) * g.grp, std::max<int64_t>(0, last_key(g.s, i1 - 1) + 1)};
}

void for_kv_groups(Context& ctx, const AttnShape& s, const uint8_t* key_mask, const std::function<void(const Group&)>& fn) {
  ctx.pool().parallel_for(s.B * s.Hkv, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) fn(Group(s, t / s.Hkv, t % s.Hkv, key_mask));
  }, 1);
}

bool visible(const Group& g, int64_t last, int64_t j) { return j <= last && (!g.mask || g.mask[j]); }

// Softmax of a tile's score rows in place (row r: query i0 + r / grp), lse per (head, query).
void softmax_tile(const Group& g, const Tile& tl, float* S, float* lse) {
  for (int64_t r = 0; r < tl.rows; ++r) {
    const int64_t i = tl.i0 + r / g.grp, last = last_key(g.s, i);
    float* row = S + r * tl.kend;
    float* L = lse + (g.b * g.s.H + g.head(r)) * g.s.Tq + i;
    float mx = kNegInf;
    for (int64_t j = 0; j <= last; ++j)
      if (visible(g, last, j)) mx = std::max(mx, row[j]);
    if (mx == kNegInf) {  // no visible key: a zero row
      std::memset(row, 0, size_t(tl.kend) * 4);
      *L = kNegInf;
      continue;
    }
    for (int64_t j = 0; j <= last; ++j) row[j] -= mx;
    exp_inplace(row, last + 1);
    double sum = 0;
    for (int64_t j = 0; j < tl.kend; ++j) {
      if (!visible(g, last, j)) row[j] = 0.f;
      sum += row[j];
    }
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
    *L = mx + float(std::log(sum));
  }
}

// P = exp(S - lse) of a tile's rows in place, zero where not visible.
void probs_tile(const Group& g, const Tile& tl, float* S, const float* lse) {
  for (int64_t r = 0; r < tl.rows; ++r) {
    const int64_t i = tl.i0 + r / g.grp;
    const float L = lse[(g.b * g.s.H + g.head(r)) * g.s.Tq + i];
    const int64_t last = L == kNegInf ? -1 : last_key(g.s, i);
    float* row = S + r * tl.kend;
    for (int64_t j = 0; j <= last; ++j) row[j] -= L;
    exp_inplace(row, last + 1);
    for (int64_t j = 0; j < tl.kend; ++j)
      if (!visible(g, last, j)) row[j] = 0.f;
  }
}

Tensor scratch(Context& ctx, int64_t n, DType t = DType::F32) { return Tensor::empty({std::max<int64_t>(n, 1)}, t, ctx); }

template <class T>
void fwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v, const uint8_t* key_mask,
         float* o, float* lse) {
  const float scale = 1.f / std::sqrt(float(s.D));
  constexpr DType op = kOperand<T>;
  for_kv_groups(ctx, s, key_mask, [&](const Group& g) {
    // From the context's cached allocator: no fresh pages per call.
    const int64_t qn = s.Tq * g.grp * s.D, kn = s.Tk * s.D, sn = std::min(s.Tq, kTile) * g.grp * s.Tk;
    Tensor Qt = scratch(ctx, qn, op), Ot = scratch(ctx, qn), Kt = scratch(ctx, kn, op), Vt = scratch(ctx, kn, op);
    Tensor St = scratch(ctx, sn), Pt = sizeof(T) == 4 ? Tensor() : scratch(ctx, sn, op);
    T *Q = Qt.data<T>(), *K = Kt.data<T>(), *V = Vt.data<T>();
    float *O = Ot.f32(), *S = St.f32();
    g.pack_q(q, Q);
    g.pack_k(k, K);
    g.pack_k(v, V);
    for (int64_t i0 = 0; i0 < s.Tq; i0 += kTile) {
      const Tile tl = tile_at(g, i0);
      const T* Qi = Q + i0 * g.grp * s.D;
      float* Oi = O + i0 * g.grp * s.D;
      if (tl.kend == 0) {  // no key visible to any query of the tile
        std::memset(Oi, 0, size_t(tl.rows * s.D) * 4);
        for (int64_t r = 0; r < tl.rows; ++r) lse[(g.b * s.H + g.head(r)) * s.Tq + i0 + r / g.grp] = kNegInf;
        continue;
      }
      gemm_on(ctx, false, true, tl.rows, tl.kend, s.D, scale, Qi, s.D, K, s.D, 0.f, S, tl.kend);
      softmax_tile(g, tl, S, lse);
      T* P = sizeof(T) == 4 ? reinterpret_cast<T*>(S) : Pt.data<T>();
      if (sizeof(T) != 4) to_operand(S, P, tl.rows * tl.kend);
      gemm_on(ctx, false, false, tl.rows, s.D, tl.kend, 1.f, P, tl.kend, V, s.D, 0.f, Oi, s.D);
    }
    g.unpack_q(O, o);
  });
}

template <class T>
void bwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v, const uint8_t* key_mask,
         const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const float scale = 1.f / std::sqrt(float(s.D));
  constexpr DType op = kOperand<T>;
  constexpr bool f32 = sizeof(T) == 4;
  for_kv_groups(ctx, s, key_mask, [&](const Group& g) {
    const int64_t qn = s.Tq * g.grp * s.D, kn = s.Tk * s.D, sn = std::min(s.Tq, kTile) * g.grp * s.Tk;
    Tensor Qt = scratch(ctx, qn, op), dOt = scratch(ctx, qn, op), dQt = scratch(ctx, qn), Dt = scratch(ctx, s.Tq * g.grp);
    Tensor Kt = scratch(ctx, kn, op), Vt = scratch(ctx, kn, op), dKt = scratch(ctx, kn), dVt = scratch(ctx, kn);
    Tensor Pt = scratch(ctx, sn), dPt = scratch(ctx, sn), Pb = f32 ? Tensor() : scratch(ctx, sn, op);
    T *Q = Qt.data<T>(), *dO = dOt.data<T>(), *K = Kt.data<T>(), *V = Vt.data<T>();
    float *dQ = dQt.f32(), *Di = Dt.f32(), *dK = dKt.f32(), *dV = dVt.f32(), *P = Pt.f32(), *dP = dPt.f32();
    g.pack_q(q, Q);
    g.pack_q(dout, dO);
    g.pack_k(k, K);
    g.pack_k(v, V);
    std::memset(dK, 0, size_t(kn) * 4);
    std::memset(dV, 0, size_t(kn) * 4);
    for (int64_t t = 0; t < s.Tq; ++t)  // di = rowsum(dO o) per (query, head), fp32
      for (int64_t h = 0; h < g.grp; ++h) {
        const float* a = dout + g.q_off(t) + h * s.D;
        const float* c = o + g.q_off(t) + h * s.D;
        float d = 0;
        for (int64_t e = 0; e < s.D; ++e) d += a[e] * c[e];
        Di[t * g.grp + h] = d;
      }
    for (int64_t i0 = 0; i0 < s.Tq; i0 += kTile) {
      const Tile tl = tile_at(g, i0);
      const int64_t r0 = i0 * g.grp, pn = tl.rows * tl.kend;
      const T *Qi = Q + r0 * s.D, *dOi = dO + r0 * s.D;
      if (tl.kend == 0) {
        std::memset(dQ + r0 * s.D, 0, size_t(tl.rows * s.D) * 4);
        continue;
      }
      // The probabilities (and below dS) as GEMM operands: P itself, or rounded into Pb.
      T* Pop = f32 ? reinterpret_cast<T*>(P) : Pb.data<T>();
      T* dSop = f32 ? reinterpret_cast<T*>(dP) : Pb.data<T>();
      gemm_on(ctx, false, true, tl.rows, tl.kend, s.D, scale, Qi, s.D, K, s.D, 0.f, P, tl.kend);
      probs_tile(g, tl, P, lse);
      if (!f32) to_operand(P, Pop, pn);
      gemm_on(ctx, true, false, tl.kend, s.D, tl.rows, 1.f, Pop, tl.kend, dOi, s.D, 1.f, dV, s.D);
      gemm_on(ctx, false, true, tl.rows, tl.kend, s.D, 1.f, dOi, s.D, V, s.D, 0.f, dP, tl.kend);
      for (int64_t r = 0; r < tl.rows; ++r) {
        const float* pr = P + r * tl.kend;
        float* dr = dP + r * tl.kend;
        const float di = Di[r0 + r];
        for (int64_t j = 0; j < tl.kend; ++j) dr[j] = pr[j] * (dr[j] - di);
      }
      if (!f32) to_operand(dP, dSop, pn);
      gemm_on(ctx, false, false, tl.rows, s.D, tl.kend, scale, dSop, tl.kend, K, s.D, 0.f, dQ + r0 * s.D, s.D);
      gemm_on(ctx, true, false, tl.kend, s.D, tl.rows, scale, dSop, tl.kend, Qi, s.D, 1.f, dK, s.D);
    }
    g.unpack_q(dQ, dq);
    g.unpack_k(dK, dk);
    g.unpack_k(dV, dv);
  });
}
}  // namespace

void attention_fwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse, bool bf16) {
  if (bf16) return fwd<uint16_t>(ctx, s, q, k, v, key_mask, o, lse);
  fwd<float>(ctx, s, q, k, v, key_mask, o, lse);
}

void attention_bwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* dq, float* dk,
                   float* dv, bool bf16) {
  if (bf16) return bwd<uint16_t>(ctx, s, q, k, v, key_mask, o, lse, dout, dq, dk, dv);
  bwd<float>(ctx, s, q, k, v, key_mask, o, lse, dout, dq, dk, dv);
}

}  // namespace ar::cpu
