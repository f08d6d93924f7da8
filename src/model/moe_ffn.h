// The mixture-of-experts feed-forward of a decoder block (Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3, ...),
// forward and backward, over the same op-table policies as the block (model/block_impl.h). With
// h = rmsnorm(x1) [N, C]:
//   logits = h Wr^T (+ br) [N, E] (fp32);  S(n), w[n, k]: the K experts the routing picks for token n and
//     their weights (model/moe_router.h)
//   expert e on its routed rows X_e = h[rows(e)]:  Y_e = (silu(X_e Wg_e^T) * (X_e Wu_e^T)) Wd_e^T, or with
//     gpt-oss's biases and clamped gate (BlockDims::act, MoeDims::expert_bias)
//     Y_e = act(X_e Wg_e^T + bg_e, X_e Wu_e^T + bu_e) Wd_e^T + bd_e
//   y[n] = sum_{k=0..K-1} w[n,k] Y_{S_k}[n]   (in k order, so the bits do not depend on threads or on
//     which other tokens share the batch)
//   a shared expert: y += SwiGLU_shared(h), times sigmoid(h Wsg^T) behind a gate (Qwen2-MoE)
//   Routing (which experts, their weights w and the gradient back to the logits): model/moe_router.h
// FP8_STATIC (ActQdq, by linear_slot: expert e's gate/up/down at 4 + 3e + 0/1/2, the shared expert's
// after the experts): each quantized Linear reads the QDQ of its input (gate and up each their own), and
// its backward goes through that QDQ as the dense block's does, adding dL/ds to dscale[slot].
// Experts that receive no row are skipped (their weight gradients are a product over zero rows: zero,
// plus whatever the policy adds to a weight gradient, e.g. the tuning tree's addends). The backward reaches the
// router through the routing weights (dL/dw -> dL/dp -> dL/dlogits), so the input gradient carries the
// routing path as autograd's does; the chosen experts are held fixed, as top-k has no gradient. The
// experts' biases get their gradients where the weights' are written or added directly (not through a
// deferral sink: the tuner, which tunes no bias, defers).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/act_qdq_linear.h"
#include "model/block_dims.h"
#include "model/moe_router.h"

namespace ar {

// dW (+)= dy^T x over zero rows: an expert that no row reaches still gets what the policy adds to a
// weight gradient (the tuning tree's addends), and a written gradient its zeros.
template <class Ops>
void weight_grad_of_no_rows(Ops& o, typename Ops::Real* dW, bool acc, int64_t in, int64_t out) {
  if (!dW) return;
  auto z = o.alloc(1);
  const typename Ops::Operand none = o.operand(Ops::ptr(z), 0);
  o.linear_bwd(none, none, nullptr, nullptr, false, dW, acc, nullptr, 0, in, out);
}

template <class Ops>
class MoeFfn {
 public:
  using T = typename Ops::Real;
  using Buf = typename Ops::Buf;
  using Operand = typename Ops::Operand;

  struct Expert {
    std::vector<int64_t> slots;  // routed (token, k) slots n*K + k, in token order
    Buf x;                       // the routed rows of h [rows, C]
    Operand xo, ao;              // x and silu(g)*u as GEMM operands
    Operand q[3];                // FP8_STATIC: the QDQ inputs gate, up and down read
    Buf g, u, y;                 // gate/up outputs [rows, I] and the expert's output [rows, C]
    int64_t rows() const { return int64_t(slots.size()); }
  };
  struct Cache {
    Buf probs;                 // [N, E]
    std::vector<int32_t> idx;  // [N, K] chosen experts
    std::vector<int64_t> row;  // [N, K] each slot's row in its expert's batch
    Buf wt;                    // [N, K] routing weights
    std::vector<Expert> ex;
    Buf sg, su, sy, sz;        // shared expert: gate/up outputs, output [N, C], gate logit [N]
    Operand sao, sq[3];
    const ActQdq<T>* act = nullptr;
    Operand h;                // the input (route)
    int64_t leaf = -1;        // the deferral sink's leaf of this batch (-1: the last begun)
    Buf dw;                   // [N, K] dL/d(routing weight) (output_grads)
    std::vector<Buf> dye, dxe;  // per expert: output and input gradients of its rows
    // run_experts over several caches with stacked rows (stacks_rows): per expert, the rows of all of
    // them in the caches' order, held by the first cache; every cache's Expert views its own rows.
    std::vector<Expert> stacked;
  };

  MoeFfn(Ops& ops, const BlockDims& d) : ops_(ops), d_(d), m_(d.moe) {}

  // One expert's weights (gate, up, down) and biases (null: none).
  struct ExpertW {
    const T *g, *u, *d, *bg = nullptr, *bu = nullptr, *bd = nullptr;
  };
  // Where an expert's gradients go (null: not wanted).
  struct ExpertGrads {
    T *g = nullptr, *u = nullptr, *d = nullptr, *bg = nullptr, *bu = nullptr, *bd = nullptr;
  };
  static ExpertW expert_w(const BlockPtrs<const T*>& w, int64_t e) {
    const size_t i = size_t(e);
    if (w.ebg.empty()) return {w.eg[i], w.eu[i], w.ed[i]};
    return {w.eg[i], w.eu[i], w.ed[i], w.ebg[i], w.ebu[i], w.ebd[i]};
  }

  // Forward in three stages, so that a caller with several batches (the tuner's leaves) can run the
  // experts of all of them in one pass: route each batch, run_experts over all, combine each
  // (BlockRunner::forward does the three for one). The bits do not depend on how many batches share the
  // pass (run_experts). h: an operand holding fp32 values in h.x.

  // Router logits, softmax, top-K and the routing weights; fills the experts' slot lists. Keeps h.
  void route(const BlockPtrs<const T*>& w, const Operand& h, int64_t N, Cache& c, const ActQdq<T>* act = nullptr) {
    const int64_t E = m_.E, K = m_.K;
    c.h = h;
    c.act = act;
    c.probs = ops_.alloc(N * E);
    ops_.linear_fwd(h, w.router, w.router_bias, p(c.probs), N, d_.C, E);
    c.idx.assign(size_t(N * K), 0);
    c.row.assign(size_t(N * K), 0);
    c.wt = ops_.alloc(N * K);
    c.ex.assign(size_t(E), Expert{});
    MoeRouter<T> router(m_);
    for (int64_t n = 0; n < N; ++n) {
      router.route(p(c.probs) + n * E, w.score_bias, c.idx.data() + n * K, p(c.wt) + n * K);
      for (int64_t k = 0; k < K; ++k) {
        const size_t s = size_t(n * K + k);
        Expert& x = c.ex[size_t(c.idx[s])];
        c.row[s] = x.rows();
        x.slots.push_back(int64_t(s));
      }
    }
  }

  // The routed experts of every routed batch in `cs`, grouped on the pool by expert: an expert runs its
  // GEMMs on each batch's rows in turn, or, where the policy's GEMM rows are independent of the call's
  // other rows (stacks_rows), once over all batches' rows stacked (run_stacked): the same bits.
  void run_experts(const BlockPtrs<const T*>& w, std::span<Cache* const> cs) {
    const int64_t C = d_.C, K = m_.K;
    std::vector<int64_t> rows(static_cast<size_t>(m_.E));
    for (const Cache* c : cs)
      for (int64_t e = 0; e < m_.E; ++e) rows[size_t(e)] += c->ex[size_t(e)].rows();
    const bool stack = cs.size() > 1 && stacks_rows() && !cs.front()->act;
    if (stack) cs.front()->stacked.assign(size_t(m_.E), Expert{});
    grouped(rows, [&](Ops& o, int64_t e) {
      if constexpr (requires { o.experts_stack_rows(); }) {
        if (stack) return run_stacked(o, w, cs, e);
      }
      for (Cache* c : cs) {
        Expert& x = c->ex[size_t(e)];
        const int64_t r = x.rows();
        if (r == 0) continue;
        x.x = o.alloc(r * C);
        for (int64_t i = 0; i < r; ++i) o.copy(c->h.x + x.slots[size_t(i)] / K * C, p(x.x) + i * C, C);
        x.xo = o.operand(p(x.x), r * C);
        x.y = o.alloc(r * C);
        swiglu_fwd(o, c->act, expert_slot(e), x.xo, expert_w(w, e), r, m_.I, x.g, x.u, x.ao, x.q, p(x.y));
      }
    });
  }

  // y [N, C] = the routing-weighted sum of each token's experts (in k order), plus the shared expert.
  void combine(const BlockPtrs<const T*>& w, int64_t N, T* y, Cache& c) {
    const int64_t C = d_.C, K = m_.K;
    for (int64_t n = 0; n < N; ++n) {
      T* yn = y + n * C;
      std::fill(yn, yn + C, T(0));
      for (int64_t k = 0; k < K; ++k) {
        const T wk = p(c.wt)[n * K + k];
        const T* src = expert_row(c, n, k);
        for (int64_t i = 0; i < C; ++i) yn[i] += wk * src[i];
      }
    }
    if (m_.Is) shared_fwd(w, c.h, N, y, c);
  }

  // Backward in three stages likewise (BlockRunner::backward): output_grads of each batch,
  // expert_grads over all of them (several only with a deferral sink: without one a weight gradient
  // would be a sum over batches), then input_grad of each. Weight gradients go to the non-null entries
  // of g (written when !acc); dscale (by linear_slot, may be null) accumulates dL/ds of the activation
  // QDQs.

  // dL/dw of every slot, and the experts' output gradients w * dy (kept in the cache).
  void output_grads(int64_t N, const T* dy, Cache& c) {
    const int64_t C = d_.C, K = m_.K, E = m_.E;
    c.dw = ops_.alloc(N * K);
    c.dye.assign(size_t(E), Buf{});
    for (int64_t e = 0; e < E; ++e)
      if (!c.ex[size_t(e)].slots.empty()) c.dye[size_t(e)] = ops_.alloc(c.ex[size_t(e)].rows() * C);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = c.idx[size_t(n * K + k)];
        const T* yr = expert_row(c, n, k);
        T* d = p(c.dye[size_t(e)]) + c.row[size_t(n * K + k)] * C;
        const T wk = p(c.wt)[n * K + k];
        T s = 0;
        for (int64_t i = 0; i < C; ++i) {
          s += dy[n * C + i] * yr[i];
          d[i] = wk * dy[n * C + i];
        }
        p(c.dw)[n * K + k] = s;
      }
  }

  // The routed experts' backward for every batch in `cs` (after its output_grads), grouped on the pool
  // by expert as run_experts: each batch's input gradient of the expert's rows into the cache, and its
  // weight gradients into g (one batch) or, with a deferral sink (cpu::DeferredGrads: the tuning
  // tree's), their products handed over under the batch's leaf (Cache::leaf; -1: the last begun).
  // An item's cost: its GEMMs' rows, plus the pass over its weight gradients (all an expert without
  // rows costs when its gradients are wanted: the policy still writes or adds its addends); with the
  // sink an expert without rows has nothing to do.
  void expert_grads(const BlockPtrs<const T*>& w, std::span<Cache* const> cs, const BlockPtrs<T*>& g, bool acc,
                    T* dscale) {
    const int64_t C = d_.C, E = m_.E, I = m_.I;
    const bool defer = deferring(), want_dw = !defer && (!g.eg.empty() || !g.eu.empty() || !g.ed.empty());
    if (cs.size() > 1 && want_dw) fail(ErrorKind::Internal, "MoeFfn::expert_grads: several batches need a deferral sink");
    std::vector<int64_t> cost(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      for (const Cache* c : cs) cost[size_t(e)] += 4 * c->ex[size_t(e)].rows();
      cost[size_t(e)] += want_dw ? 8 : 0;
    }
    for (Cache* c : cs) c->dxe.assign(size_t(E), Buf{});
    const bool stacked = cs.size() > 1 && !cs.front()->stacked.empty();
    grouped(cost, [&](Ops& o, int64_t e) {
      T* dWg = g.eg.empty() ? nullptr : g.eg[size_t(e)];
      T* dWu = g.eu.empty() ? nullptr : g.eu[size_t(e)];
      T* dWd = g.ed.empty() ? nullptr : g.ed[size_t(e)];
      if constexpr (requires { o.experts_stack_rows(); }) {
        if (stacked) return stacked_grads(o, w, cs, e, dWg != nullptr, dWu != nullptr, dWd != nullptr);
      }
      for (Cache* c : cs) {
        Expert& x = c->ex[size_t(e)];
        const int64_t r = x.rows();
        if (r == 0) {  // a product over no rows (deferred: none)
          if (defer) continue;
          weight_grad_of_no_rows(o, dWg, acc, C, I);
          weight_grad_of_no_rows(o, dWu, acc, C, I);
          weight_grad_of_no_rows(o, dWd, acc, I, C);
          continue;
        }
        c->dxe[size_t(e)] = o.alloc(r * C);
        Buf& dye = c->dye[size_t(e)];
        const Operand dy_e = o.operand(p(dye), r * C);
        ExpertGrads grads;
        if (!defer) {
          auto at = [e](const std::vector<T*>& v) { return v.empty() ? nullptr : v[size_t(e)]; };
          grads = {dWg, dWu, dWd, at(g.ebg), at(g.ebu), at(g.ebd)};
        }
        const auto d = swiglu_bwd(o, c->act, expert_slot(e), dy_e, x.xo, x.ao, x.q, x.g, x.u, expert_w(w, e),
                                  p(c->dxe[size_t(e)]), grads, acc, r, I, dscale);
        if constexpr (requires { o.defer; }) {
          if (!defer) continue;
          const int64_t leaf = c->leaf >= 0 ? c->leaf : o.defer->leaves() - 1;
          auto put = [&](int64_t kind, const Operand& dy_k, const Operand& in, const Buf& keep, int64_t n_in,
                         int64_t n_out) { o.defer->put(leaf, 3 * e + kind, {dy_k, in, {keep}, r, n_in, n_out}); };
          if (dWg) put(0, d.first, x.xo, x.x, C, I);
          if (dWu) put(1, d.second, x.xo, x.x, C, I);
          if (dWd) put(2, dy_e, x.ao, dye, I, C);
        }
      }
    });
  }

  // dh [N, C] (written): the router's input gradient (and Wr's gradient), the shared expert's, then
  // each token's experts' input gradients in k order. Releases the batch's expert buffers.
  void input_grad(const BlockPtrs<const T*>& w, int64_t N, const T* dy, T* dh, const BlockPtrs<T*>& g, bool acc,
                  Cache& c, T* dscale = nullptr) {
    const int64_t C = d_.C, K = m_.K, E = m_.E;
    Buf dlogits = ops_.alloc(N * E);
    route_bwd(c, p(c.dw), p(dlogits), N);
    ops_.linear_bwd(ops_.operand(p(dlogits), N * E), c.h, w.router, dh, false, g.router, acc, g.router_bias, N, C, E);
    if (m_.Is) shared_bwd(w, c.h, N, dy, dh, g, acc, c, dscale);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = c.idx[size_t(n * K + k)];
        const T* src = p(c.dxe[size_t(e)]) + c.row[size_t(n * K + k)] * C;
        for (int64_t i = 0; i < C; ++i) dh[n * C + i] += src[i];
      }
    c.dxe.clear();
    c.dye.clear();
    c.stacked.clear();
  }

 private:
  static T* p(Buf& b) { return Ops::ptr(b); }
  // linear_slot of expert e's gate: after the attention module's Linears.
  size_t expert_slot(int64_t e) const { return d_.attn_linears() + size_t(3 * e); }
  size_t shared_slot() const { return expert_slot(m_.E); }
  // Whether an expert's GEMMs may take several batches' rows in one call with the bits of each batch's
  // own calls (cpu::CpuOps::experts_stack_rows: GEMMs whose rows do not depend on the call's other rows).
  bool stacks_rows() const {
    if constexpr (requires { ops_.experts_stack_rows(); }) return ops_.experts_stack_rows();
    return false;
  }
  // run_experts' expert e with its rows of every cache stacked into one set of GEMMs (stacks_rows; no
  // activation QDQ): gathered in the caches' order into cs.front()->stacked[e], each cache's Expert then
  // viewing its rows.
  void run_stacked(Ops& o, const BlockPtrs<const T*>& w, std::span<Cache* const> cs, int64_t e) {
    const int64_t C = d_.C, I = m_.I, K = m_.K;
    Expert& s = cs.front()->stacked[size_t(e)];
    int64_t R = 0;
    for (const Cache* c : cs) R += c->ex[size_t(e)].rows();
    s.x = o.alloc(R * C);
    for (int64_t off = 0; const Cache* c : cs) {
      const Expert& x = c->ex[size_t(e)];
      for (int64_t i = 0; i < x.rows(); ++i) o.copy(c->h.x + x.slots[size_t(i)] / K * C, p(s.x) + (off + i) * C, C);
      off += x.rows();
    }
    s.xo = o.operand(p(s.x), R * C);
    s.y = o.alloc(R * C);
    swiglu_fwd(o, nullptr, expert_slot(e), s.xo, expert_w(w, e), R, I, s.g, s.u, s.ao, s.q, p(s.y));
    for (int64_t off = 0; Cache* c : cs) {
      Expert& x = c->ex[size_t(e)];
      const int64_t r = x.rows();
      if (r == 0) continue;
      x.x = s.x.slice(off * C, r * C);
      x.xo = Ops::slice(s.xo, off * C, r * C);
      x.g = s.g.slice(off * I, r * I);
      x.u = s.u.slice(off * I, r * I);
      x.ao = Ops::slice(s.ao, off * I, r * I);
      x.y = s.y.slice(off * C, r * C);
      off += r;
    }
  }
  // expert_grads' expert e after run_stacked: one backward over the stacked rows (output gradients
  // gathered in the caches' order), each cache's input gradient a view of its rows, and its weight-
  // gradient products (on its own rows) handed to the deferral sink under its leaf.
  void stacked_grads(Ops& o, const BlockPtrs<const T*>& w, std::span<Cache* const> cs, int64_t e, bool want_g,
                     bool want_u, bool want_d) {
    const int64_t C = d_.C, I = m_.I;
    Expert& s = cs.front()->stacked[size_t(e)];
    const int64_t R = s.x.numel() / C;
    Buf dys = o.alloc(R * C), dxs = o.alloc(R * C);
    for (int64_t off = 0; Cache* c : cs) {
      const int64_t r = c->ex[size_t(e)].rows();
      if (r > 0) o.copy(p(c->dye[size_t(e)]), p(dys) + off * C, r * C);
      off += r;
    }
    const auto d = swiglu_bwd(o, nullptr, expert_slot(e), o.operand(p(dys), R * C), s.xo, s.ao, s.q, s.g, s.u,
                              expert_w(w, e), p(dxs), {}, false, R, I, nullptr);
    for (int64_t off = 0; Cache* c : cs) {
      const Expert& x = c->ex[size_t(e)];
      const int64_t r = x.rows();
      if (r == 0) continue;
      c->dxe[size_t(e)] = dxs.slice(off * C, r * C);
      const int64_t leaf = c->leaf >= 0 ? c->leaf : o.defer->leaves() - 1;
      auto put = [&](int64_t kind, const Operand& dy_k, const Operand& in, const Buf& keep, int64_t n_in,
                     int64_t n_out) { o.defer->put(leaf, 3 * e + kind, {dy_k, in, {keep}, r, n_in, n_out}); };
      if (want_g) put(0, Ops::slice(d.first, off * I, r * I), x.xo, x.x, C, I);
      if (want_u) put(1, Ops::slice(d.second, off * I, r * I), x.xo, x.x, C, I);
      if (want_d) put(2, o.operand(p(c->dye[size_t(e)]), r * C), x.ao, c->dye[size_t(e)], I, C);
      off += r;
    }
  }
  bool deferring() const {
    if constexpr (requires { ops_.defer; }) return ops_.defer != nullptr;
    return false;
  }
  // fn(ops, i) for every item i with cost[i] > 0: on the pool at once where the policy groups work
  // (cpu::CpuOps::for_each_group), else one after another.
  template <class F>
  void grouped(const std::vector<int64_t>& cost, F&& fn) {
    if constexpr (requires(Ops& o) { o.for_each_group(cost, fn); }) {
      ops_.for_each_group(cost, fn);
    } else {
      for (size_t i = 0; i < cost.size(); ++i)
        if (cost[i] > 0) fn(ops_, int64_t(i));
    }
  }
  const T* expert_row(Cache& c, int64_t n, int64_t k) const {
    const size_t s = size_t(n * m_.K + k);
    return p(c.ex[size_t(c.idx[s])].y) + c.row[s] * d_.C;
  }

  // dL/dw [N, K] -> dL/dlogits [N, E] (MoeRouter::backward, token by token).
  void route_bwd(Cache& c, const T* dw, T* dlogits, int64_t N) const {
    const int64_t E = m_.E, K = m_.K;
    const MoeRouter<T> router(m_);
    for (int64_t n = 0; n < N; ++n)
      router.backward(p(c.probs) + n * E, c.idx.data() + n * K, p(c.wt) + n * K, dw + n * K, dlogits + n * E);
  }

  // The activation QDQ scale of Linear `slot` (FP8_STATIC; 0: none).
  static T scale(const ActQdq<T>* act, size_t slot) { return act ? act->at(slot) : T(0); }
  static const Operand& input(Ops& o, const ActQdq<T>* act, size_t slot, const Operand& x, Operand& q, int64_t n) {
    return act_qdq_input(o, scale(act, slot), x, q, n);
  }
  static void linear_bwd(Ops& o, const ActQdq<T>* act, size_t slot, const Operand& dy, const Operand& x,
                         const Operand& q, const T* W, T* dx, bool acc_dx, T* dW, T* db, bool acc, int64_t n,
                         int64_t in, int64_t out, T* dscale) {
    act_qdq_linear_bwd(o, scale(act, slot), slot, dy, x, q, W, dx, acc_dx, dW, acc, db, n, in, out, dscale);
  }

  // y = (silu(x Wg^T) * (x Wu^T)) Wd^T over r rows (BlockDims::act's gate, W's biases), keeping g, u, the
  // product operand a and the QDQ inputs q (Linears slot, slot + 1, slot + 2) for backward (on `o`: ops_ or
  // a grouped item's serial ops).
  void swiglu_fwd(Ops& o, const ActQdq<T>* act, size_t slot, const Operand& x, const ExpertW& W, int64_t r, int64_t I,
                  Buf& g, Buf& u, Operand& a, Operand* q, T* y) const {
    g = o.alloc(r * I);
    u = o.alloc(r * I);
    o.linear_fwd(input(o, act, slot, x, q[0], r * d_.C), W.g, W.bg, p(g), r, d_.C, I);
    o.linear_fwd(input(o, act, slot + 1, x, q[1], r * d_.C), W.u, W.bu, p(u), r, d_.C, I);
    a = o.swiglu_operand(p(g), p(u), r * I, d_.act);
    o.linear_fwd(input(o, act, slot + 2, a, q[2], r * I), W.d, W.bd, y, r, I, d_.C);
  }
  // Its backward from dy [r, C]: dx [r, C] written, weight gradients as in the block (the non-null
  // ones); returns the gate and up outputs' gradients.
  std::pair<Operand, Operand> swiglu_bwd(Ops& o, const ActQdq<T>* act, size_t slot, const Operand& dy,
                                         const Operand& x, const Operand& a, const Operand* q, Buf& g, Buf& u,
                                         const ExpertW& W, T* dx, const ExpertGrads& dW, bool acc, int64_t r,
                                         int64_t I, T* dscale) const {
    Buf da = o.alloc(r * I);
    linear_bwd(o, act, slot + 2, dy, a, q[2], W.d, p(da), false, dW.d, dW.bd, acc, r, I, d_.C, dscale);
    auto d = o.swiglu_bwd_operands(p(da), p(g), p(u), r * I, d_.act);
    linear_bwd(o, act, slot, d.first, x, q[0], W.g, dx, false, dW.g, dW.bg, acc, r, d_.C, I, dscale);
    linear_bwd(o, act, slot + 1, d.second, x, q[1], W.u, dx, true, dW.u, dW.bu, acc, r, d_.C, I, dscale);
    return d;
  }

  static T sigmoid(T z) { return T(1) / (T(1) + std::exp(-z)); }

  // y += g * SwiGLU_shared(h), g = sigmoid(h Wsg^T) behind a shared gate (MoeDims::shared_gate), else 1.
  void shared_fwd(const BlockPtrs<const T*>& w, const Operand& h, int64_t N, T* y, Cache& c) {
    const int64_t C = d_.C;
    c.sy = ops_.alloc(N * C);
    swiglu_fwd(ops_, c.act, shared_slot(), h, {w.sg, w.su, w.sd}, N, m_.Is, c.sg, c.su, c.sao, c.sq, p(c.sy));
    if (!m_.shared_gate) return ops_.add(y, p(c.sy), y, N * C);
    c.sz = ops_.alloc(N);
    ops_.linear_fwd(h, w.sgate, nullptr, p(c.sz), N, C, 1);
    for (int64_t n = 0; n < N; ++n) {
      const T s = sigmoid(p(c.sz)[n]);
      for (int64_t i = 0; i < C; ++i) y[n * C + i] += s * p(c.sy)[n * C + i];
    }
  }
  // Adds the shared expert's and its gate's input gradients to dh.
  void shared_bwd(const BlockPtrs<const T*>& w, const Operand& h, int64_t N, const T* dy, T* dh,
                  const BlockPtrs<T*>& g, bool acc, Cache& c, T* dscale) {
    const int64_t C = d_.C;
    Buf dsy = ops_.alloc(m_.shared_gate ? N * C : 1), dxs = ops_.alloc(N * C);
    if (m_.shared_gate) {
      Buf dz = ops_.alloc(N);
      for (int64_t n = 0; n < N; ++n) {
        const T s = sigmoid(p(c.sz)[n]);
        T dot = 0;
        for (int64_t i = 0; i < C; ++i) {
          dot += dy[n * C + i] * p(c.sy)[n * C + i];
          p(dsy)[n * C + i] = s * dy[n * C + i];
        }
        p(dz)[n] = dot * s * (T(1) - s);
      }
      ops_.linear_bwd(ops_.operand(p(dz), N), h, w.sgate, dh, true, g.sgate, acc, nullptr, N, C, 1);
    }
    swiglu_bwd(ops_, c.act, shared_slot(), ops_.operand(m_.shared_gate ? p(dsy) : dy, N * C), h, c.sao, c.sq, c.sg,
               c.su, {w.sg, w.su, w.sd}, p(dxs), {g.sg, g.su, g.sd}, acc, N, m_.Is, dscale);
    ops_.add(dh, p(dxs), dh, N * C);
  }

  Ops& ops_;
  BlockDims d_;
  MoeDims m_;
};

}  // namespace ar
