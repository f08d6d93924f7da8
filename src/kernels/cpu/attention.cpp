// Causal GQA attention with a key padding mask, an optional sliding window and optional sinks, on fp32
// GEMMs. Layouts: q/o [B,Tq,H,D], k/v [B,Tk,Hkv,D], lse [B,H,Tq], sinks [H].
// A (batch, KV head) group's query heads are packed dense as one matrix [Tq * grp, D] (row (t, head))
// and its K, V as [Tk, D], so every product is one dense GEMM (oneDNN's brgemm, not strided
// sub-matrices). Queries go in tiles of kTile positions: a tile's keys stop at its last query's last
// visible key and start at its first query's first (a sliding window's), so the causal upper triangle
// and the keys behind a window are mostly never computed. A sink adds exp(sink) to a row's softmax sum.
// Per tile: S = scale Q K^T, masked softmax rows, O = P V.
// Backward recomputes P from lse (nothing of size T^2 is kept between passes), a tile's keys in blocks
// of kKeyBlock: dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o)), dQ += scale dS K, dK += scale dS^T Q.
// Tiles, GEMM shapes and the order of the dK/dV sums depend on the shape only, never on the thread count.
// The pool's threads take whole groups, or, where there are too few groups to share (a 256-token leaf
// of a model with 3 KV heads on 2 threads left one thread idle a third of the time), (group, tile)
// pairs: a tile's dK and dV terms then go to buffers of its own, zeroed and added into as the whole
// group's are, and the group's tiles are summed in tile order after them. Every element gets the same
// additions in the same order (0 + p_0 + p_1 ..., never -0 + ...): the bits of whole groups.
// Reference: kernels/ref/attention_ref.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/tensor.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kTile = 128;      // query positions per tile
constexpr int64_t kKeyBlock = 256;  // keys per block of the backward: a tile's P and dP blocks stay in L2

// Visible keys for query i are j in [first, last] with key_mask set (last < first: none).
inline int64_t last_key(const AttnShape& s, int64_t i) { return std::min(s.Tk - 1, i + (s.Tk - s.Tq)); }
inline int64_t first_key(const AttnShape& s, int64_t i) {
  return s.window > 0 ? std::max<int64_t>(0, i + (s.Tk - s.Tq) - s.window + 1) : 0;
}

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

  void pack_q(const float* x, float* dense, int64_t t0, int64_t t1) const {  // positions [t0, t1)
    for (int64_t t = t0; t < t1; ++t) std::memcpy(dense + t * grp * s.D, x + q_off(t), size_t(grp * s.D) * 4);
  }
  void unpack_q(const float* dense, float* x, int64_t t0, int64_t t1) const {  // positions [t0, t1)
    for (int64_t t = t0; t < t1; ++t) std::memcpy(x + q_off(t), dense + t * grp * s.D, size_t(grp * s.D) * 4);
  }
  void pack_k(const float* x, float* dense, int64_t n) const {  // keys [0, n)
    for (int64_t t = 0; t < n; ++t) std::memcpy(dense + t * s.D, x + k_off(t), size_t(s.D) * 4);
  }
  void unpack_k(const float* dense, float* x) const {
    for (int64_t t = 0; t < s.Tk; ++t) std::memcpy(x + k_off(t), dense + t * s.D, size_t(s.D) * 4);
  }
};

// Query positions [i0, i1) of a tile, its packed rows and the keys [kbeg, kend) it reads.
struct Tile {
  int64_t i0, i1, rows, kbeg, kend;
  int64_t keys() const { return kend - kbeg; }
};

Tile tile_at(const Group& g, int64_t i0) {
  const int64_t i1 = std::min(g.s.Tq, i0 + kTile), kend = std::max<int64_t>(0, last_key(g.s, i1 - 1) + 1);
  return {i0, i1, (i1 - i0) * g.grp, std::min(first_key(g.s, i0), kend), kend};
}

// The score rows work in kLanes interleaved lanes (lane l takes j = l mod kLanes), which the compiler
// maps onto SIMD registers; the order of every reduction is fixed by the row length alone.
constexpr int64_t kLanes = 16;

// row[0, n) (keys k0 + j) with the masked keys set to -inf (exp gives 0 for them).
void mask_span(const Group& g, int64_t k0, float* row, int64_t n) {
  if (!g.mask) return;
  for (int64_t j = 0; j < n; ++j) row[j] = g.mask[k0 + j] ? row[j] : kNegInf;
}

float row_max(const float* row, int64_t n) {
  float m[kLanes];
  std::fill(m, m + kLanes, kNegInf);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) m[l] = row[j + l] > m[l] ? row[j + l] : m[l];
  for (int64_t l = 0; j < n; ++j, ++l) m[l] = row[j] > m[l] ? row[j] : m[l];
  return *std::max_element(m, m + kLanes);
}

// The sum of row[0, n) in double, lane by lane, then the lanes in order.
double row_sum(const float* row, int64_t n) {
  double a[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) a[l] += double(row[j + l]);
  for (int64_t l = 0; j < n; ++j, ++l) a[l] += double(row[j]);
  double sum = 0;
  for (double v : a) sum += v;
  return sum;
}

// Softmax of a tile's score rows in place (row r: query i0 + r / grp; column j: key kbeg + j), lse per
// (head, query); a row's sink joins its max and its sum.
void softmax_tile(const Group& g, const Tile& tl, float* S, float* lse, const float* sinks) {
  const int64_t n = tl.keys();
  for (int64_t r = 0; r < tl.rows; ++r) {
    const int64_t i = tl.i0 + r / g.grp, lo = std::clamp<int64_t>(first_key(g.s, i) - tl.kbeg, 0, n);
    const int64_t cnt = std::clamp<int64_t>(last_key(g.s, i) - tl.kbeg + 1 - lo, 0, n - lo);  // visible [lo, lo + cnt)
    float *row = S + r * n, *vis = row + lo;
    float* L = lse + (g.b * g.s.H + g.head(r)) * g.s.Tq + i;
    std::fill(row, vis, 0.f);
    std::fill(vis + cnt, row + n, 0.f);
    mask_span(g, tl.kbeg + lo, vis, cnt);
    const float sink = sinks ? sinks[g.head(r)] : kNegInf;
    const float mx = std::max(row_max(vis, cnt), sink);
    if (mx == kNegInf) {  // no visible key and no sink: a zero row
      std::fill(vis, vis + cnt, 0.f);
      *L = kNegInf;
      continue;
    }
    for (int64_t j = 0; j < cnt; ++j) vis[j] -= mx;
    exp_inplace(vis, cnt);
    const double sum = row_sum(vis, cnt) + (sinks ? double(std::exp(sink - mx)) : 0.0);
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < cnt; ++j) vis[j] *= inv;
    *L = mx + float(std::log(sum));
  }
}

// P = exp(S - lse) of a tile's rows in place for keys [k0, k0 + kb), zero where not visible.
void probs_block(const Group& g, const Tile& tl, int64_t k0, int64_t kb, float* S, const float* lse) {
  for (int64_t r = 0; r < tl.rows; ++r) {
    const int64_t i = tl.i0 + r / g.grp;
    const float L = lse[(g.b * g.s.H + g.head(r)) * g.s.Tq + i];
    const bool none = L == kNegInf;  // keys of the block from the window's start up to the causal limit
    const int64_t a = none ? 0 : std::clamp<int64_t>(first_key(g.s, i) - k0, 0, kb);
    const int64_t e = none ? 0 : std::clamp<int64_t>(last_key(g.s, i) - k0 + 1, a, kb);
    float* row = S + r * kb;
    std::fill(row, row + a, 0.f);
    std::fill(row + e, row + kb, 0.f);
    mask_span(g, k0 + a, row + a, e - a);
    for (int64_t j = a; j < e; ++j) row[j] -= L;
    exp_inplace(row + a, e - a);
  }
}

Tensor scratch(Context& ctx, int64_t n) { return Tensor::empty({std::max<int64_t>(n, 1)}, DType::F32, ctx); }

// The work items: whole groups, or (group, tile) pairs where groups are too few to share fairly.
struct Items {
  int64_t groups, tiles;  // tiles: per item of a group (1: the item is the group)
  int64_t count() const { return groups * tiles; }
};

Items plan_items(Context& ctx, const AttnShape& s) {
  const int64_t groups = s.B * s.Hkv, tiles = (s.Tq + kTile - 1) / kTile, threads = ctx.threads();
  const bool split = threads > 1 && tiles > 1 && groups < 4 * threads && groups % threads != 0;
  return {groups, split ? tiles : 1};
}

void for_items(Context& ctx, const Items& it, const std::function<void(int64_t)>& fn) {
  ctx.pool().parallel_for(it.count(), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) fn(u);
  }, 1);
}

// Query tiles [t0, t1) of group g: the forward.
void forward_tiles(Context& ctx, const Group& g, int64_t t0, int64_t t1, const float* q, const float* k,
                   const float* v, float* o, float* lse, const float* sinks) {
  const AttnShape& s = g.s;
  const float scale = ref::softmax_scale<float>(s);
  // From the context's cached allocator: no fresh pages per call.
  const int64_t qn = s.Tq * g.grp * s.D, kn = s.Tk * s.D;
  Tensor Qt = scratch(ctx, qn), Ot = scratch(ctx, qn), Kt = scratch(ctx, kn), Vt = scratch(ctx, kn);
  Tensor St = scratch(ctx, std::min(s.Tq, kTile) * g.grp * s.Tk);
  float *Q = Qt.f32(), *O = Ot.f32(), *K = Kt.f32(), *V = Vt.f32(), *S = St.f32();
  const int64_t p0 = t0 * kTile, p1 = std::min(s.Tq, t1 * kTile), keys = t1 > t0 ? tile_at(g, (t1 - 1) * kTile).kend : 0;
  g.pack_q(q, Q, p0, p1);  // the rows and keys these tiles read
  g.pack_k(k, K, keys);
  g.pack_k(v, V, keys);
  for (int64_t t = t0; t < t1; ++t) {
    const Tile tl = tile_at(g, t * kTile);
    float* Qi = Q + tl.i0 * g.grp * s.D;
    float* Oi = O + tl.i0 * g.grp * s.D;
    if (tl.keys() == 0) {  // no key visible to any query of the tile: only a sink, if any
      std::memset(Oi, 0, size_t(tl.rows * s.D) * 4);
      for (int64_t r = 0; r < tl.rows; ++r)
        lse[(g.b * s.H + g.head(r)) * s.Tq + tl.i0 + r / g.grp] = sinks ? sinks[g.head(r)] : kNegInf;
      continue;
    }
    const int64_t n = tl.keys();
    gemm_serial(ctx, false, true, tl.rows, n, s.D, scale, Qi, s.D, K + tl.kbeg * s.D, s.D, 0.f, S, n);
    softmax_tile(g, tl, S, lse, sinks);
    gemm_serial(ctx, false, false, tl.rows, s.D, n, 1.f, S, n, V + tl.kbeg * s.D, s.D, 0.f, Oi, s.D);
  }
  g.unpack_q(O, o, p0, p1);
}

// The backward's operands of one group, packed dense.
struct BwdOperands {
  const float *Q, *dO, *K, *V;
};

// Query tiles [t0, t1) of group g: dQ of their rows (into dQ), and their dK, dV terms added into dK,
// dV (zeroed by the caller).
void backward_tiles(Context& ctx, const Group& g, int64_t t0, int64_t t1, const BwdOperands& x, const float* o,
                    const float* dout, const float* lse, float* dQ, float* dK, float* dV) {
  const AttnShape& s = g.s;
  const float scale = ref::softmax_scale<float>(s);
  const int64_t sn = std::min(s.Tq, kTile) * g.grp * std::min(s.Tk, kKeyBlock);
  Tensor Pt = scratch(ctx, sn), dPt = scratch(ctx, sn), Dt = scratch(ctx, std::min(s.Tq, kTile) * g.grp);
  float *P = Pt.f32(), *dP = dPt.f32(), *Di = Dt.f32();
  for (int64_t t = t0; t < t1; ++t) {
    const Tile tl = tile_at(g, t * kTile);
    const int64_t r0 = tl.i0 * g.grp;
    const float *Qi = x.Q + r0 * s.D, *dOi = x.dO + r0 * s.D;
    float* dQi = dQ + r0 * s.D;
    for (int64_t i = tl.i0; i < tl.i1; ++i)  // di = rowsum(dO o) per (query, head)
      for (int64_t h = 0; h < g.grp; ++h) {
        const float* a = dout + g.q_off(i) + h * s.D;
        const float* c = o + g.q_off(i) + h * s.D;
        float d = 0;
        for (int64_t e = 0; e < s.D; ++e) d += a[e] * c[e];
        Di[(i - tl.i0) * g.grp + h] = d;
      }
    if (tl.keys() == 0) std::memset(dQi, 0, size_t(tl.rows * s.D) * 4);
    for (int64_t k0 = tl.kbeg; k0 < tl.kend; k0 += kKeyBlock) {  // P, dP: [rows, kb]
      const int64_t kb = std::min(kKeyBlock, tl.kend - k0);
      const float *Kb = x.K + k0 * s.D, *Vb = x.V + k0 * s.D;
      gemm_serial(ctx, false, true, tl.rows, kb, s.D, scale, Qi, s.D, Kb, s.D, 0.f, P, kb);
      probs_block(g, tl, k0, kb, P, lse);
      gemm_serial(ctx, true, false, kb, s.D, tl.rows, 1.f, P, kb, dOi, s.D, 1.f, dV + k0 * s.D, s.D);
      gemm_serial(ctx, false, true, tl.rows, kb, s.D, 1.f, dOi, s.D, Vb, s.D, 0.f, dP, kb);
      for (int64_t r = 0; r < tl.rows; ++r) {
        const float* pr = P + r * kb;
        float* dr = dP + r * kb;
        const float di = Di[r];
        for (int64_t j = 0; j < kb; ++j) dr[j] = pr[j] * (dr[j] - di);
      }
      gemm_serial(ctx, false, false, tl.rows, s.D, kb, scale, dP, kb, Kb, s.D, k0 > tl.kbeg ? 1.f : 0.f, dQi, s.D);
      gemm_serial(ctx, true, false, kb, s.D, tl.rows, scale, dP, kb, Qi, s.D, 1.f, dK + k0 * s.D, s.D);
    }
  }
}
}  // namespace

void attention_fwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, float* o, float* lse, const float* sinks) {
  const Items it = plan_items(ctx, s);
  for_items(ctx, it, [&](int64_t u) {
    const Group g(s, u / it.tiles / s.Hkv, u / it.tiles % s.Hkv, key_mask);
    const int64_t t0 = it.tiles == 1 ? 0 : u % it.tiles, t1 = it.tiles == 1 ? (s.Tq + kTile - 1) / kTile : t0 + 1;
    forward_tiles(ctx, g, t0, t1, q, k, v, o, lse, sinks);
  });
}

void attention_bwd(Context& ctx, const AttnShape& s, const float* q, const float* k, const float* v,
                   const uint8_t* key_mask, const float* o, const float* lse, const float* dout, float* dq, float* dk,
                   float* dv) {
  const Items it = plan_items(ctx, s);
  const int64_t tiles = (s.Tq + kTile - 1) / kTile, kn = s.Tk * s.D;
  // Split groups: each item's dK and dV terms, [items][2][Tk, D], summed per group afterwards.
  Tensor parts = it.tiles > 1 ? scratch(ctx, 2 * it.count() * kn) : Tensor();
  for_items(ctx, it, [&](int64_t u) {
    const Group g(s, u / it.tiles / s.Hkv, u / it.tiles % s.Hkv, key_mask);
    const int64_t t0 = it.tiles == 1 ? 0 : u % it.tiles, t1 = it.tiles == 1 ? tiles : t0 + 1;
    const int64_t qn = s.Tq * g.grp * s.D;
    Tensor Qt = scratch(ctx, qn), dOt = scratch(ctx, qn), dQt = scratch(ctx, qn), Kt = scratch(ctx, kn),
           Vt = scratch(ctx, kn), own = it.tiles > 1 ? Tensor() : scratch(ctx, 2 * kn);
    const int64_t p0 = t0 * kTile, p1 = std::min(s.Tq, t1 * kTile), keys = t1 > t0 ? tile_at(g, (t1 - 1) * kTile).kend : 0;
    g.pack_q(q, Qt.f32(), p0, p1);  // the rows and keys these tiles read
    g.pack_q(dout, dOt.f32(), p0, p1);
    g.pack_k(k, Kt.f32(), keys);
    g.pack_k(v, Vt.f32(), keys);
    float* dK = it.tiles > 1 ? parts.f32() + 2 * u * kn : own.f32();
    float* dV = dK + kn;
    std::memset(dK, 0, size_t(2 * kn) * 4);
    backward_tiles(ctx, g, t0, t1, {Qt.f32(), dOt.f32(), Kt.f32(), Vt.f32()}, o, dout, lse, dQt.f32(), dK, dV);
    g.unpack_q(dQt.f32(), dq, p0, p1);
    if (it.tiles > 1) return;
    g.unpack_k(dK, dk);
    g.unpack_k(dV, dv);
  });
  if (it.tiles == 1) return;
  ctx.pool().parallel_for(it.groups, [&](int64_t g0, int64_t g1) {
    for (int64_t gi = g0; gi < g1; ++gi) {
      const Group g(s, gi / s.Hkv, gi % s.Hkv, key_mask);
      float* dK = parts.f32() + 2 * gi * it.tiles * kn;  // tile 0's terms, then each later tile's added
      float* dV = dK + kn;
      for (int64_t t = 1; t < it.tiles; ++t) {
        const float* pk = dK + 2 * t * kn;
        const float* pv = pk + kn;
        for (int64_t e = 0, n = tile_at(g, t * kTile).kend * s.D; e < n; ++e) dK[e] += pk[e], dV[e] += pv[e];
      }
      g.unpack_k(dK, dk);
      g.unpack_k(dV, dv);
    }
  }, 1);
}

void attention_sink_grad(Context& ctx, const AttnShape& s, const float* sinks, const float* o, const float* lse,
                         const float* dout, float* dsinks) {
  ctx.pool().parallel_for(s.H, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      double g = 0;  // over (b, i) in order: the same bits on any thread count
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t i = 0; i < s.Tq; ++i) {
          const float l = lse[(b * s.H + h) * s.Tq + i];
          if (l == kNegInf) continue;
          const float* a = dout + ((b * s.Tq + i) * s.H + h) * s.D;
          const float* c = o + ((b * s.Tq + i) * s.H + h) * s.D;
          double di = 0;
          for (int64_t d = 0; d < s.D; ++d) di += double(a[d]) * double(c[d]);
          g -= std::exp(double(sinks[h]) - double(l)) * di;
        }
      dsinks[h] = float(g);
    }
  }, 1);
}

}  // namespace ar::cpu
