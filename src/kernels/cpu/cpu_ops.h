// Policy object exposing the fp32 CPU kernels under the op table of kernels/ref/ref_ops.h.
// Scratch buffers are Tensors from the context's allocator (so peak bytes are accounted).
// With `amp` set (--amp), the Linears' GEMMs take bf16 operands with fp32 accumulation (linear_bf16.cpp);
// every other op, all activations and all gradients stay fp32.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

// The bf16 GEMM operands of a block's weights under --amp, keyed by the fp32 address the block passes
// for the weight (its BlockPtrs slot): W in bf16, and optionally packed for the forward and the input
// gradient (Bf16Weight). A weight without an entry is rounded to bf16 at every call.
class Bf16Operands {
 public:
  void bind(const float* w, const Bf16Weight& b) { m_[w] = b; }
  const Bf16Weight* find(const float* w) const {
    auto it = m_.find(w);
    return it == m_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<const float*, Bf16Weight> m_;  // seven in a dense block, 3 per expert more in a MoE one
};

// Matrices to add to a weight gradient right after its GEMM (gemm's `add`), keyed by the dW address the
// block passes: the tuning's gradient tree sums subtrees inside its last leaf's dW GEMMs
// (quant/signround.cpp) instead of in separate passes over the gradient.
class GradAddends {
 public:
  void set(const float* dW, std::vector<const float*> add) { m_[dW] = std::move(add); }
  void clear() { m_.clear(); }
  Addends find(const float* dW) const {
    auto it = m_.find(dW);
    return it == m_.end() ? Addends() : Addends(it->second);
  }

 private:
  std::unordered_map<const float*, std::vector<const float*>> m_;
};

class DeferredGrads;

struct CpuOps {
  using Real = float;
  using Buf = Tensor;
  Context& ctx;
  const Bf16Operands* amp = nullptr;  // non-null: bf16 GEMM operands
  const GradAddends* grad_add = nullptr;  // non-null: addends of weight gradients
  DeferredGrads* defer = nullptr;  // non-null: a MoE block hands its experts' weight-gradient products here
  // linear_fwd's and linear_bwd's input-gradient GEMMs on kernels whose rows do not depend on the other
  // rows of a call: gemm_rows (ops.h) in fp32, gemm_rows_bf16 (bf16_ops.h) under amp. expert_row_gemms
  // gives that to the MoE experts' items (for_each_group), which may then stack several leaves' rows of
  // an expert into one call with the bits of the leaves' own calls (MoeFfn::run_experts; the tuner sets
  // it with --deterministic, quant/signround.cpp). Weight gradients are one leaf of the kernel that sums
  // a deferred expert's leaves in one pass (quant/expert_grad_tree.h): weight_grad_tree_f32 from AVX2
  // on (the usual GEMM at the scalar level), weight_grad_tree_bf16 under amp. Under amp only at the
  // avx512_bf16 level: with AMX, oneDNN's AMX kernels keep every product (per leaf).
  bool row_gemms = false;
  bool expert_row_gemms = false;
  // fp32: each operand packed by the first weight gradient that reads it (Operand::xf32; the AVX2
  // level's GEMMs read such packs): q, k and v share one pack of x, gate and up one of theirs.
  bool pack_operands = false;
  bool experts_stack_rows() const { return expert_row_gemms && has_row_gemms(amp != nullptr); }
  static bool has_row_gemms(bool amp) {
    return !amp || (kernel_isa() == Isa::avx512_bf16 && gemm_rows_bf16_supported());
  }
  Buf alloc(int64_t n) { return Tensor::empty({n}, DType::F32, ctx); }
  static float* ptr(Buf& b) { return b.f32(); }
  void copy(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }
  // `cols` elements of each of `rows` rows, between row strides (a column block of a matrix).
  void copy_cols(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(cols) * 4);
  }
  // dst's column block += src's (rows x cols, row strides as copy_cols).
  void add_cols(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) dst[r * dst_stride + i] += src[r * src_stride + i];
  }
  void zero(float* dst, int64_t n) { std::memset(dst, 0, size_t(n) * 4); }

  // Grouped work (a MoE block's experts): fn(ops, i) for every i with cost[i] > 0, the items split over
  // the pool in contiguous runs of about equal total cost, each thread's items on serial kernels (a
  // one-thread view of ctx). Every kernel's bits are independent of its thread count (GEMMs cut the same
  // units either way, matmul.cpp), so the results equal running the items one by one on the whole pool.
  template <class F>
  void for_each_group(const std::vector<int64_t>& cost, F&& fn) {
    const int64_t n = int64_t(cost.size());
    int64_t total = 0;
    for (int64_t c : cost) total += c;
    const int threads = int(std::min<int64_t>(ctx.threads(), n));
    if (threads <= 1 || total == 0) {
      CpuOps sub = item_ops(ctx);
      for (int64_t i = 0; i < n; ++i)
        if (cost[size_t(i)] > 0) fn(sub, i);
      return;
    }
    std::vector<int64_t> first(size_t(threads) + 1, n);  // thread t runs items [first[t], first[t + 1])
    first[0] = 0;
    int64_t acc = 0, t = 1;
    for (int64_t i = 0; i < n && t < threads; ++i) {
      acc += cost[size_t(i)];
      while (t < threads && acc * threads >= total * t) first[size_t(t++)] = i + 1;
    }
    ctx.pool().parallel_for(threads, [&](int64_t t0, int64_t t1) {
      Context one = Context::serial_view(ctx);
      CpuOps sub = item_ops(one);
      for (int64_t u = t0; u < t1; ++u)
        for (int64_t i = first[size_t(u)]; i < first[size_t(u) + 1]; ++i)
          if (cost[size_t(i)] > 0) fn(sub, i);
    }, 1);
  }

  // The ops of a grouped item, on context c.
  CpuOps item_ops(Context& c) const {
    CpuOps sub{c, amp, grad_add, defer};
    sub.keep_fp32 = keep_fp32;
    sub.row_gemms = experts_stack_rows();
    return sub;
  }

  // A GEMM operand (an activation or an output gradient), prepared once for every Linear that reads it:
  // fp32 x, and under amp its bf16 copy xb. A producer that writes the operand in bf16 only (the
  // *_operand ops below under amp) leaves x null, unless keep_fp32 asks for both (the imatrix pass).
  struct Operand {
    const float* x = nullptr;
    Tensor xf;  // x's storage when a producer below made it
    Tensor xb;  // amp: bf16 [n]
    std::shared_ptr<PackedB> xp = std::make_shared<PackedB>();  // amp: xb packed by the first weight gradient
    std::shared_ptr<PackedF32> xf32 = std::make_shared<PackedF32>();  // pack_operands: x, likewise
  };
  bool keep_fp32 = false;
  // Elements [first, first + n) of an operand, sharing its storage.
  static Operand slice(const Operand& o, int64_t first, int64_t n) {
    Operand v;
    v.x = o.x ? o.x + first : nullptr;
    if (o.xf.defined()) v.xf = o.xf.slice(first, n);
    if (o.xb.defined()) v.xb = o.xb.slice(first, n);
    return v;
  }
  Operand operand(const float* x, int64_t n) {
    Operand o{x, {}, {}};
    if (amp) {
      o.xb = Tensor::empty({n}, DType::BF16, ctx);
      cpu::fp32_to_bf16(ctx, x, o.xb.data<uint16_t>(), n);
    }
    return o;
  }
  Operand rmsnorm_operand(const float* x, const float* w, float* rstd, int64_t rows, int64_t dim, double eps) {
    if (!amp || keep_fp32) {
      Tensor y = alloc(rows * dim);
      cpu::rmsnorm_fwd(ctx, x, w, y.f32(), rstd, rows, dim, eps);
      return owned(std::move(y));
    }
    Operand o;
    o.xb = Tensor::empty({rows * dim}, DType::BF16, ctx);
    cpu::rmsnorm_fwd_bf16(ctx, x, w, o.xb.data<uint16_t>(), rstd, rows, dim, eps);
    return o;
  }
  Operand swiglu_operand(const float* g, const float* u, int64_t n, const GateAct& act = {}) {
    if (!amp || keep_fp32) {
      Tensor a = alloc(n);
      cpu::swiglu_fwd(ctx, g, u, a.f32(), n, act);
      return owned(std::move(a));
    }
    Operand o;
    o.xb = Tensor::empty({n}, DType::BF16, ctx);
    cpu::swiglu_fwd_bf16(ctx, g, u, o.xb.data<uint16_t>(), n, act);
    return o;
  }
  // The gradients of the gate and up projections' outputs, as GEMM operands.
  std::pair<Operand, Operand> swiglu_bwd_operands(const float* da, const float* g, const float* u, int64_t n,
                                                  const GateAct& act = {}) {
    if (!amp) {
      Tensor dg = alloc(n), du = alloc(n);
      cpu::swiglu_bwd(ctx, da, g, u, dg.f32(), du.f32(), n, act);
      return {owned(std::move(dg)), owned(std::move(du))};
    }
    std::pair<Operand, Operand> d;
    d.first.xb = Tensor::empty({n}, DType::BF16, ctx);
    d.second.xb = Tensor::empty({n}, DType::BF16, ctx);
    cpu::swiglu_bwd_bf16(ctx, da, g, u, d.first.xb.data<uint16_t>(), d.second.xb.data<uint16_t>(), n, act);
    return d;
  }
  // FP8_STATIC's activation QDQ of operand x, which needs its fp32 values (keep_fp32 under amp).
  Operand act_qdq_operand(const Operand& x, float s, int64_t n) {
    Tensor y = alloc(n);
    cpu::act_qdq_fwd(ctx, x.x, s, y.f32(), n);
    return owned(std::move(y));
  }
  float act_qdq_bwd(const float* x, float s, const float* dq, float* dx, bool acc, int64_t rows, int64_t dim) {
    return float(cpu::act_qdq_bwd(ctx, x, s, dq, dx, acc, rows, dim));
  }
  void linear_fwd(const Operand& x, const float* W, const float* b, float* y, int64_t n, int64_t in, int64_t out) {
    if (amp && row_gemms)
      return cpu::linear_fwd_bf16_rows(ctx, x.x, x.xb.data<uint16_t>(), W, amp->find(W), b, y, n, in, out);
    if (amp) return cpu::linear_fwd_bf16(ctx, x.x, x.xb.data<uint16_t>(), W, amp->find(W), b, y, n, in, out);
    if (!row_gemms) return cpu::linear_fwd(ctx, x.x, W, b, y, n, in, out);
    cpu::gemm_rows(ctx, false, true, n, out, in, 1.f, x.x, in, W, in, 0.f, y, out);
    if (b) cpu::add_bias(ctx, b, y, n, out);
  }
  // dW += dy^T x (acc_dW) or dW = dy^T x.
  void linear_bwd(const Operand& dy, const Operand& x, const float* W, float* dx, bool acc, float* dW, bool acc_dW,
                  float* db, int64_t n, int64_t in, int64_t out) {
    const Addends add = grad_add && dW ? grad_add->find(dW) : Addends();
    if (row_gemms && dx) {
      if (amp) cpu::linear_dx_bf16_rows(ctx, dy.x, dy.xb.data<uint16_t>(), W, amp->find(W), dx, acc, n, in, out);
      else cpu::gemm_rows(ctx, false, false, n, in, out, 1.f, dy.x, out, W, in, acc ? 1.f : 0.f, dx, in);
      dx = nullptr;
    }
    if (dW) {  // a leaf's product as the one-pass tree of a deferred expert weight takes it (when it can)
      std::vector<int> adds;
      for (size_t k = 0; k < add.size(); ++k) adds.push_back(-1 - int(k));
      if (grad_tree({{&dy, &x, n}}, {{0, acc_dW, std::move(adds)}}, add, out, in, dW)) dW = nullptr;
    }
    if (!dx && !dW && !db) return;
    if (amp)
      return cpu::linear_bwd_bf16(ctx, dy.x, dy.xb.data<uint16_t>(), x.x, x.xb.data<uint16_t>(), W, amp->find(W), dx,
                                  acc, dW, acc_dW, db, n, in, out, add, x.xp.get());
    cpu::linear_bwd(ctx, dy.x, x.x, W, dx, acc, dW, db, n, in, out, acc_dW, add,
                    pack_operands ? x.xf32.get() : nullptr);
  }

  // A weight gradient's tree over leaves (products dy_l^T x_l of `rows` rows; rows 0: no product),
  // summed by `steps` into dW with `extra` addends, in one pass over the weight where the kernels
  // allow it: with row_gemms, weight_grad_tree_bf16 under amp, weight_grad_tree_f32 from AVX2 on.
  // False (nothing done) elsewhere: the caller sums leaf by leaf with linear_bwd. A lone leaf
  // (linear_bwd's own call) and a deferred expert's tree (quant/expert_grad_tree.h) take the same path,
  // so a rank of one leaf and a rank of eight sum the same products.
  struct GradLeaf {
    const Operand* dy = nullptr;
    const Operand* x = nullptr;
    int64_t rows = 0;
  };
  bool grad_tree(const std::vector<GradLeaf>& leaves, const std::vector<GradTreeStep>& steps, Addends extra,
                 int64_t out, int64_t in, float* dW) {
    if (!row_gemms || (!amp && !weight_grad_tree_f32_supported())) return false;
    if (!amp) {
      std::vector<GradLeafF32> f;
      for (const GradLeaf& l : leaves) f.push_back(l.rows > 0 ? GradLeafF32{l.dy->x, l.x->x, l.rows} : GradLeafF32{});
      cpu::weight_grad_tree_f32(ctx, f, steps, extra, out, in, dW);
      return true;
    }
    std::vector<Tensor> held(2 * leaves.size());  // bf16 copies of operands that have none
    std::vector<GradLeafBf16> b;
    for (size_t i = 0; i < leaves.size(); ++i) {
      const GradLeaf& l = leaves[i];
      b.push_back(l.rows > 0 ? GradLeafBf16{bf16_of(*l.dy, l.rows * out, held[2 * i]),
                                            bf16_of(*l.x, l.rows * in, held[2 * i + 1]), l.rows}
                             : GradLeafBf16{});
    }
    cpu::weight_grad_tree_bf16(ctx, b, steps, extra, out, in, dW);
    return true;
  }
  void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, double eps) {
    cpu::rmsnorm_fwd(ctx, x, w, y, rstd, rows, dim, eps);
  }
  void rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd, float* dx, bool acc, float* dw,
                   int64_t rows, int64_t dim) {
    cpu::rmsnorm_bwd(ctx, dy, x, w, rstd, dx, acc, dw, rows, dim);
  }
  void rope_fwd(float* x, const int32_t* pos, const float* c, const float* s, int64_t rows, int64_t heads,
                const RopeDims& d) {
    cpu::rope_fwd(ctx, x, pos, c, s, rows, heads, d);
  }
  void rope_bwd(float* x, const int32_t* pos, const float* c, const float* s, int64_t rows, int64_t heads,
                const RopeDims& d) {
    cpu::rope_bwd(ctx, x, pos, c, s, rows, heads, d);
  }
  void attention_fwd(const AttnShape& sh, const float* q, const float* k, const float* v, const uint8_t* m, float* o,
                     float* lse, const float* sinks = nullptr) {
    cpu::attention_fwd(ctx, sh, q, k, v, m, o, lse, sinks);
  }
  void attention_sink_grad(const AttnShape& sh, const float* sinks, const float* o, const float* lse,
                           const float* dout, float* dsinks) {
    cpu::attention_sink_grad(ctx, sh, sinks, o, lse, dout, dsinks);
  }
  void attention_bwd(const AttnShape& sh, const float* q, const float* k, const float* v, const uint8_t* m,
                     const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
    cpu::attention_bwd(ctx, sh, q, k, v, m, o, lse, dout, dq, dk, dv);
  }
  void add(const float* a, const float* b, float* y, int64_t n) { cpu::add(ctx, a, b, y, n); }
  void output_gate_fwd(const float* o, const float* g, float* y, int64_t n) { cpu::output_gate_fwd(ctx, o, g, y, n); }
  void output_gate_bwd(const float* dy, const float* o, const float* g, float* d_o, float* dg, int64_t n) {
    cpu::output_gate_bwd(ctx, dy, o, g, d_o, dg, n);
  }

  // Gated DeltaNet (ops.h: delta_net.cpp, gated_delta.cpp); gated_delta_fwd returns the state checkpoints
  // its backward reads.
  void conv_silu_fwd(const float* x, const float* w, float* y, float* z, int64_t B, int64_t T, int64_t C, int64_t K) {
    cpu::conv_silu_fwd(ctx, x, w, y, z, B, T, C, K);
  }
  void conv_silu_bwd(const float* dy, const float* z, const float* x, const float* w, float* dx, float* dw, int64_t B,
                     int64_t T, int64_t C, int64_t K) {
    cpu::conv_silu_bwd(ctx, dy, z, x, w, dx, dw, B, T, C, K);
  }
  void l2norm_fwd(const float* x, float* y, int64_t rows, int64_t dim, float scale) {
    cpu::l2norm_fwd(ctx, x, y, rows, dim, scale);
  }
  void l2norm_bwd(const float* dy, const float* x, float* dx, int64_t rows, int64_t dim, float scale) {
    cpu::l2norm_bwd(ctx, dy, x, dx, rows, dim, scale);
  }
  void gated_rmsnorm_fwd(const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t dim, double eps) {
    cpu::gated_rmsnorm_fwd(ctx, x, z, w, y, rows, dim, eps);
  }
  void gated_rmsnorm_bwd(const float* dy, const float* x, const float* z, const float* w, float* dx, float* dz, float* dw,
                         int64_t rows, int64_t dim, double eps) {
    cpu::gated_rmsnorm_bwd(ctx, dy, x, z, w, dx, dz, dw, rows, dim, eps);
  }
  void decay_beta_fwd(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g, float* beta,
                      int64_t rows, int64_t H) {
    cpu::decay_beta_fwd(ctx, a, b, A_log, dt_bias, g, beta, rows, H);
  }
  void decay_beta_bwd(const float* dg, const float* dbeta, const float* a, const float* b, const float* A_log,
                      const float* dt_bias, float* da, float* db, float* dA_log, float* ddt_bias, int64_t rows,
                      int64_t H) {
    cpu::decay_beta_bwd(ctx, dg, dbeta, a, b, A_log, dt_bias, da, db, dA_log, ddt_bias, rows, H);
  }
  Buf gated_delta_fwd(const ref::DeltaShape& sh, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* o) {
    Buf saved = alloc(std::max<int64_t>(1, cpu::gated_delta_checkpoint_floats(sh)));
    cpu::gated_delta_fwd(ctx, sh, q, k, v, g, beta, o, saved.f32());
    return saved;
  }
  void gated_delta_bwd(const ref::DeltaShape& sh, const float* dO, const float* q, const float* k, const float* v,
                       const float* g, const float* beta, const Buf& saved, float* dq, float* dk, float* dv, float* dg,
                       float* dbeta) {
    cpu::gated_delta_bwd(ctx, sh, dO, q, k, v, g, beta, saved.f32(), dq, dk, dv, dg, dbeta);
  }

 private:
  // An operand's bf16 values: its copy, or x rounded into t.
  const uint16_t* bf16_of(const Operand& o, int64_t n, Tensor& t) {
    if (o.xb.defined()) return o.xb.data<uint16_t>();
    t = Tensor::empty({n}, DType::BF16, ctx);
    cpu::fp32_to_bf16(ctx, o.x, t.data<uint16_t>(), n);
    return t.data<uint16_t>();
  }
  Operand owned(Tensor t) {  // an fp32 result as an operand (amp: with its bf16 copy)
    Operand o = operand(t.f32(), t.numel());
    o.xf = std::move(t);
    return o;
  }
};

// The experts' weight-gradient products of the leaves of a tuning tree, kept instead of computed so the
// tree can sum each expert's leaves on buffers of one expert (quant/expert_grad_tree.h) rather than
// passing over every expert's full-size gradient at every leaf. Per leaf, per weight slot (3 e + 0/1/2
// for expert e's gate/up/down): dW = dy^T x over `rows` rows, [out, in], with the operands kept alive.
// A slot a leaf routes no row to has no product. Leaves are begun in order; put() may fill any begun
// leaf, and from several threads at once for distinct slots.
class DeferredGrads {
 public:
  struct Product {
    CpuOps::Operand dy, x;
    std::vector<Tensor> keep;  // the storage dy.x / x.x point into when no operand owns it
    int64_t rows = 0, in = 0, out = 0;
  };
  void begin_leaf(int64_t slots) { leaves_.emplace_back(size_t(slots)); }
  void put(int64_t leaf, int64_t slot, Product p) { leaves_[size_t(leaf)][size_t(slot)] = std::move(p); }
  int64_t leaves() const { return int64_t(leaves_.size()); }
  const Product* find(int64_t leaf, int64_t slot) const {
    const Product& p = leaves_[size_t(leaf)][size_t(slot)];
    return p.rows > 0 ? &p : nullptr;
  }
  void clear() { leaves_.clear(); }

 private:
  std::vector<std::vector<Product>> leaves_;
};

}  // namespace ar::cpu
