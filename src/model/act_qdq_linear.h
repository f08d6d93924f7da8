// A Linear's input and backward under FP8_STATIC's activation QDQ (ActQdq, model/block_dims.h), over an
// op-table policy: shared by the block's own Linears (block_impl.h) and the experts' (moe_ffn.h).
// s = 0: the Linear reads its input as is.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ar {

// The operand the Linear reads: x, or its activation QDQ at scale s, kept in q for backward.
template <class Ops>
const typename Ops::Operand& act_qdq_input(Ops& o, typename Ops::Real s, const typename Ops::Operand& x,
                                           typename Ops::Operand& q, int64_t n) {
  if (s == typename Ops::Real(0)) return x;
  q = o.act_qdq_operand(x, s, n);
  return q;
}

// The Linear's backward from dy; x is its input before the QDQ q. With the QDQ, dW comes from the
// operand it read, and the input gradient (taken even with dx null, for dL/ds) goes back through the
// QDQ, adding dL/ds to dscale[slot] (dscale may be null).
template <class Ops, class T = typename Ops::Real>
void act_qdq_linear_bwd(Ops& o, T s, size_t slot, const typename Ops::Operand& dy, const typename Ops::Operand& x,
                        const typename Ops::Operand& q, const T* W, T* dx, bool acc_dx, T* dW, bool acc_dW, T* db,
                        int64_t n, int64_t in, int64_t out, T* dscale) {
  if (s == T(0)) return o.linear_bwd(dy, x, W, dx, acc_dx, dW, acc_dW, db, n, in, out);
  auto dxq = o.alloc(n * in);
  o.linear_bwd(dy, q, W, Ops::ptr(dxq), false, dW, acc_dW, db, n, in, out);
  const T ds = o.act_qdq_bwd(x.x, s, Ops::ptr(dxq), dx, acc_dx, n, in);
  if (dscale) dscale[slot] += ds;
}

}  // namespace ar
