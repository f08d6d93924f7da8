// Shapes and weight pointers of one decoder block, shared by the block runner (model/block_impl.h)
// and its mixture-of-experts feed-forward (model/moe_ffn.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ref/gate_act_ref.h"

namespace ar {

// How a mixture-of-experts feed-forward picks and weighs its experts (model/moe_router.h).
enum class Routing : uint8_t { SoftmaxTopK, TopKSoftmax, SigmoidGroups };

// A mixture-of-experts feed-forward (model/moe_ffn.h): E experts of intermediate I, top-K routing,
// a shared expert of intermediate Is (0: none), behind a sigmoid gate or not. E = 0: the dense SwiGLU MLP.
struct MoeDims {
  int64_t E = 0, K = 0, I = 0, Is = 0;
  bool norm_topk = false;
  Routing routing = Routing::SoftmaxTopK;
  int64_t groups = 1, topk_groups = 1;  // SigmoidGroups: expert groups, and how many of them a token may use
  double scaling = 1;                   // SigmoidGroups: the routed weights' factor (routed_scaling_factor)
  bool shared_gate = true;              // the shared expert's output times sigmoid(h Wsg^T) (Qwen2-MoE)
  bool expert_bias = false;             // the experts' gate, up and down carry biases (gpt-oss)
};

// The block's attention module: grouped-query attention (model/attention_gqa.h), multi-head latent
// attention (model/attention_mla.h) or Gated DeltaNet's linear attention (model/attention_delta.h).
enum class AttnKind : uint8_t { Gqa, Mla, DeltaNet };

// Gated DeltaNet (Qwen3-Next, Qwen3.5): Hk query/key heads of Dk, Hv value heads of Dv (a multiple of Hk),
// a causal depthwise conv of K taps over [q, k, v]. Projections: Qwen3-Next's fused in_proj_qkvz and
// in_proj_ba (per key head), or with `split` Qwen3.5's in_proj_qkv (the conv's order), in_proj_z, in_proj_b
// and in_proj_a.
struct DeltaDims {
  int64_t Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 4;
  bool split = false;
  int64_t key_dim() const { return Hk * Dk; }
  int64_t value_dim() const { return Hv * Dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): q through a rank-q_lora bottleneck (0: a plain
// q_proj), keys and values from a rank-kv_lora latent plus one shared RoPE key of `rope` dims; a query/key
// head is nope + rope wide, a value head v wide (v <= nope + rope).
struct MlaDims {
  int64_t q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v = 0;
  bool interleave = true;  // rope_interleave: RoPE pairs (2i, 2i + 1)
  double scale = 0;        // the softmax scale (YaRN's mscale folded in); 0: 1/sqrt(nope + rope)
};

struct BlockDims {
  int64_t C = 0, I = 0, H = 0, Hkv = 0, D = 0;
  double eps = 1e-6;
  bool qk_norm = false;
  int64_t rope = 0;  // GQA with partial RoPE: a head's first `rope` dims rotated (0: all D)
  int64_t window = 0;  // GQA: a query sees its `window` latest keys (a sliding-window layer; 0: all)
  bool sinks = false;  // GQA: a learned logit per query head in the softmax's denominator (gpt-oss)
  double scale = 0;    // GQA: the softmax's scale of q k^T (Gemma's query_pre_attn_scalar^-1/2); 0: 1/sqrt(D)
  // GQA: q_proj [H 2D, C] gives each head's query and an output gate, [q D | gate D] per head; the
  // attention's output is multiplied by sigmoid(gate) before o_proj (Qwen3-Next's gated attention).
  bool out_gate = false;
  // Sandwich norms (Gemma): the attention's and the feed-forward's outputs are RMS-normed (BlockPtrs'
  // ln_post_attn, ln_post_ffn) before their residual adds. Dense feed-forwards only.
  bool sandwich = false;
  GateAct act;         // the feed-forward's gated activation (the MLP's, every expert's)
  AttnKind attn = AttnKind::Gqa;
  MlaDims mla;
  DeltaDims delta;
  MoeDims moe;
  bool is_moe() const { return moe.E > 0; }
  // How many quantizable Linears the attention module has: the feed-forward's linear_slot start there.
  size_t attn_linears() const {
    if (attn == AttnKind::DeltaNet) return delta.split ? 3 : 2;
    return attn == AttnKind::Mla && mla.q_lora > 0 ? 5 : 4;
  }
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
  P sinks = nullptr;  // attention sinks [H] (BlockDims::sinks)
  P ln_post_attn = nullptr, ln_post_ffn = nullptr;  // sandwich norms (BlockDims::sandwich)
  // MLA (BlockDims::mla; wo is o_proj, wq the q_proj of a model without q_lora): q_a_proj [q_lora, C],
  // q_a_layernorm, q_b_proj [H (nope + rope), q_lora], kv_a_proj_with_mqa [kv_lora + rope, C],
  // kv_a_layernorm, kv_b_proj [H (nope + v), kv_lora].
  P q_a = nullptr, q_a_norm = nullptr, q_b = nullptr, kv_a = nullptr, kv_a_norm = nullptr, kv_b = nullptr;
  // Gated DeltaNet (BlockDims::delta; wo is out_proj): in_proj_qkvz [Hk (2 Dk + 2 (Hv/Hk) Dv), C] and
  // in_proj_ba [2 Hv, C] (per key head: q, k, v, z and b, a), or split (DeltaDims::split): in_qkvz is
  // in_proj_qkv [2 Hk Dk + Hv Dv, C], in_z in_proj_z [Hv Dv, C], in_b and in_a [Hv, C]; the conv kernel
  // [conv_dim, K], dt_bias and A_log [Hv], the gated norm's weight [Dv].
  P in_qkvz = nullptr, in_ba = nullptr, conv = nullptr, dt_bias = nullptr, A_log = nullptr, dnorm = nullptr;
  P in_z = nullptr, in_b = nullptr, in_a = nullptr;
  // MoE (BlockDims::moe; wg/wu/wd then unused): the router [E, C] and its bias [E] (gpt-oss); the
  // score-correction bias [E] (SigmoidGroups: selection only, no gradient); expert e's gate and up [I, C]
  // and down [C, I] (with MoeDims::expert_bias their biases [I], [I], [C]); the shared expert's gate/up/down
  // and its gate [1, C].
  P router = nullptr, router_bias = nullptr, score_bias = nullptr;
  std::vector<P> eg, eu, ed, ebg, ebu, ebd;
  P sg = nullptr, su = nullptr, sd = nullptr, sgate = nullptr;
  // The attention module these pointers belong to (linear_slot's order depends on it).
  AttnKind attn = AttnKind::Gqa;
  bool q_lora = false;  // MLA: q through q_a/q_b (else wq)
  bool delta_split = false;  // Gated DeltaNet's split projections (in_z)
  std::vector<P*> attn_linears() {
    if (attn == AttnKind::Gqa) return {&wq, &wk, &wv, &wo};
    if (attn == AttnKind::DeltaNet) return delta_split ? std::vector<P*>{&in_qkvz, &in_z, &wo} : std::vector<P*>{&in_qkvz, &wo};
    if (q_lora) return {&q_a, &q_b, &kv_a, &kv_b, &wo};
    return {&wq, &kv_a, &kv_b, &wo};
  }
  // The same module, no pointer set (a gradient set to fill).
  template <class Q>
  void same_kind(const BlockPtrs<Q>& o) {
    attn = o.attn;
    q_lora = o.q_lora;
    delta_split = o.delta_split;
  }
};

// The pointer of quantizable Linear `slot`, in quant::block_linears' order: the attention module's
// (q, k, v, o; MLA: q_a, q_b or q, kv_a, kv_b, o; Gated DeltaNet: in_proj_qkvz, out_proj, or in_proj_qkv,
// in_proj_z, out_proj), then gate, up,
// down of the dense MLP, or in a MoE block (non-empty eg) each expert's gate, up, down followed by the
// shared expert's. The router, the shared expert's gate and Gated DeltaNet's in_proj_ba (in_proj_b,
// in_proj_a) are not slots (they stay in 16 bit).
template <class P>
P& linear_slot(BlockPtrs<P>& p, size_t slot) {
  const std::vector<P*> attn = p.attn_linears();
  if (slot < attn.size()) return *attn[slot];
  slot -= attn.size();
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
