// Shapes and weight pointers of one decoder block, shared by the block runner (model/block_impl.h)
// and its mixture-of-experts feed-forward (model/moe_ffn.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ar {

// A mixture-of-experts feed-forward (model/moe_ffn.h): E experts of intermediate I, top-K routing,
// a shared expert of intermediate Is (0: none). E = 0: the dense SwiGLU MLP.
struct MoeDims {
  int64_t E = 0, K = 0, I = 0, Is = 0;
  bool norm_topk = false;
};

struct BlockDims {
  int64_t C = 0, I = 0, H = 0, Hkv = 0, D = 0;
  double eps = 1e-6;
  bool qk_norm = false;
  MoeDims moe;
  bool is_moe() const { return moe.E > 0; }
};

// The static activation scale of each Linear, by linear_slot (q, k, v, o, then the dense MLP's gate, up,
// down, or each expert's and the shared expert's); 0 or past the end: the Linear reads its input as
// is. Under amp the input operands must keep their fp32 values (keep_fp32).
template <class T>
struct ActQdq {
  std::vector<T> s;
  T at(size_t slot) const { return slot < s.size() ? s[slot] : T(0); }
};

// One pointer per block tensor; P = const T* for weights, T* for gradients. Null = absent.
template <class P>
struct BlockPtrs {
  P ln1 = nullptr, wq = nullptr, wk = nullptr, wv = nullptr, bq = nullptr, bk = nullptr, bv = nullptr;
  P q_norm = nullptr, k_norm = nullptr, wo = nullptr, bo = nullptr, ln2 = nullptr, wg = nullptr, wu = nullptr,
    wd = nullptr;
  // MoE (BlockDims::moe; wg/wu/wd then unused): the router [E, C]; expert e's gate and up [I, C] and
  // down [C, I]; the shared expert's gate/up/down and its gate [1, C].
  P router = nullptr;
  std::vector<P> eg, eu, ed;
  P sg = nullptr, su = nullptr, sd = nullptr, sgate = nullptr;
};

// The pointer of quantizable Linear `slot`, in quant::block_linears' order: q, k, v, o, then gate, up,
// down of the dense MLP, or in a MoE block (non-empty eg) each expert's gate, up, down followed by the
// shared expert's. The router and the shared expert's gate are not slots (they stay in 16 bit).
template <class P>
P& linear_slot(BlockPtrs<P>& p, size_t slot) {
  P* attn[] = {&p.wq, &p.wk, &p.wv, &p.wo};
  if (slot < 4) return *attn[slot];
  slot -= 4;
  if (p.eg.empty()) {
    P* mlp[] = {&p.wg, &p.wu, &p.wd};
    return *mlp[slot];
  }
  std::vector<P>* ex[] = {&p.eg, &p.eu, &p.ed};
  if (slot < 3 * p.eg.size()) return (*ex[slot % 3])[slot / 3];
  P* shared[] = {&p.sg, &p.su, &p.sd};
  return *shared[slot - 3 * p.eg.size()];
}

}  // namespace ar
