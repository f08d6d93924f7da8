#include "quant/signround.h"

#include "model/moe_names.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/small_float.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/moe_names.h"
#include "parallel/exchange.h"
#include "quant/expert_grad_tree.h"
#include "quant/linear_family.h"
#include "quant/sign_step.h"

namespace ar::quant {

std::vector<std::pair<std::string, Tensor*>> block_linears(BlockWeights& w) {
  std::vector<std::pair<std::string, Tensor*>> r;
  for (const BlockTensor& t : w.tensors)
    if (t.role == TensorRole::Linear) r.emplace_back(t.module(), &t.in(w));
  return r;
}

std::vector<std::pair<std::string, const Tensor*>> block_linears(const BlockWeights& w) {
  std::vector<std::pair<std::string, const Tensor*>> r;
  for (auto& [name, t] : block_linears(const_cast<BlockWeights&>(w))) r.emplace_back(name, t);  // read-only view
  return r;
}

void TuneLane::run(const std::function<void(int)>& fn) const {
  if (!group) return fn(0);
  std::vector<int> m(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) m[size_t(r)] = member(r);
  group->run_on(m, fn);
}

BlockWeights clone_block(const BlockWeights& w, Context& ctx) {
  BlockWeights m;
  m.tensors = w.tensors;
  m.attn = w.attn;
  m.mixtral_names = w.mixtral_names;
  m.size_lists();
  for (const BlockTensor& t : w.tensors) t.in(m) = t.in(w).clone(ctx);
  return m;
}

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

StratifiedSampler::StratifiedSampler(int64_t n, int64_t batch, uint64_t seed) : seed_(seed) {
  AR_CHECK(batch >= 1 && batch <= n, "sampler batch must be in [1, n]");
  for (int64_t j = 0; j < batch; ++j) {
    Stratum s;
    s.begin = j * n / batch;
    s.len = (j + 1) * n / batch - s.begin;
    strata_.push_back(std::move(s));
  }
}

std::vector<int64_t> StratifiedSampler::batch(int64_t iteration) {
  std::vector<int64_t> r;
  r.reserve(strata_.size());
  for (size_t j = 0; j < strata_.size(); ++j) {
    Stratum& s = strata_[j];
    const int64_t epoch = iteration / s.len;
    if (epoch != s.epoch) {
      s.perm.resize(size_t(s.len));
      std::iota(s.perm.begin(), s.perm.end(), s.begin);
      std::mt19937_64 rng(mix(seed_ ^ mix(uint64_t(j) * 0x100000001b3ull ^ mix(uint64_t(epoch)))));
      for (int64_t i = s.len - 1; i > 0; --i) std::swap(s.perm[size_t(i)], s.perm[size_t(rng() % uint64_t(i + 1))]);
      s.epoch = epoch;
    }
    r.push_back(s.perm[size_t(iteration % s.len)]);
  }
  return r;
}

TunedLinear make_tuned_linear(Context& ctx, const std::string& name, Tensor* weight, const QuantFormat& fmt) {
  auto filled = [&](int64_t n, float v) {
    Tensor t = Tensor::empty({n}, DType::F32, ctx);
    std::fill(t.f32(), t.f32() + n, v);
    return t;
  };
  TunedLinear L;
  L.name = name;
  L.weight = weight;
  if (fmt.is_float()) {
    FpQdqShape sh = fp_shape(fmt, weight->dim(0), weight->dim(1));
    if (sh.family == FpFamily::Nvfp4) sh.global_scale = nvfp4_global_scale(weight->f32(), weight->numel());
    const int64_t nt = sh.tiles();
    L.fp = sh;
    L.V = Tensor::zeros({sh.out, sh.padded_in()}, DType::F32, ctx);
    L.alpha = filled(nt, 1.f);
    L.beta = filled(nt, 1.f);
    L.wmin0 = filled(nt, 1.f);
    L.wmax0 = Tensor::empty({nt}, DType::F32, ctx);
    L.scale = Tensor::zeros({nt}, DType::F32, ctx);
    L.zero = Tensor::zeros({nt}, DType::F32, ctx);
    fp_qdq_amax(sh, weight->f32(), L.wmax0.f32());
    return L;
  }
  L.shape = make_qdq_shape(weight->dim(0), weight->dim(1), fmt.bits, fmt.group_size, fmt.sym);
  const int64_t ng = L.shape.out * L.shape.groups();
  L.V = Tensor::zeros({L.shape.out, L.shape.groups() * L.shape.group}, DType::F32, ctx);
  L.alpha = filled(ng, 1.f);
  L.beta = filled(ng, 1.f);
  L.wmin0 = Tensor::empty({ng}, DType::F32, ctx);
  L.wmax0 = Tensor::empty({ng}, DType::F32, ctx);
  L.scale = Tensor::empty({ng}, DType::F32, ctx);
  L.zero = Tensor::empty({ng}, DType::F32, ctx);
  qdq_minmax(ctx, L.shape, weight->f32(), L.wmin0.f32(), L.wmax0.f32());
  return L;
}

FpQdqShape fp_shape(const QuantFormat& fmt, int64_t out, int64_t in) {
  AR_CHECK(fmt.fp.has_value(), "fp_shape of an integer format");
  if (fmt.bits != 4 && fmt.bits != 8)
    fail(ErrorKind::InvalidInput, "float weights have 4 (E2M1) or 8 (E4M3) bits, not " + std::to_string(fmt.bits));
  return make_fp_qdq_shape(*fmt.fp, fmt.bits == 4 ? FpElem::E2M1 : FpElem::E4M3, out, in, fmt.group_size,
                           fmt.block_rows);
}

// NVFP4 global scales that vLLM's fused kernels need shared (AutoRound's update_fused_layer_global_scales):
// q/k/v of the attention, and gate/up of each MLP: the dense one, each expert's (mlp.experts.<e>.,
// Mixtral's block_sparse_moe.experts.<e>.) and the shared expert's. The group is the module path.
void share_fused_global_scales(std::vector<TunedLinear>& layers) {
  std::map<std::string, std::vector<FpQdqShape*>> groups;
  for (auto& L : layers) {
    if (!L.fp || L.fp->family != FpFamily::Nvfp4) continue;
    const size_t dot = L.name.rfind('.');
    const std::string parent = L.name.substr(0, dot == std::string::npos ? 0 : dot),
                      leaf = L.name.substr(dot == std::string::npos ? 0 : dot + 1);
    if (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj" || leaf == "gate_proj" || leaf == "up_proj")
      groups[parent + (leaf == "gate_proj" || leaf == "up_proj" ? ":mlp" : ":attn")].push_back(&*L.fp);
  }
  for (auto& [parent, members] : groups) {
    if (members.size() < 2) continue;
    float g = members[0]->global_scale;
    for (const FpQdqShape* m : members) g = std::min(g, m->global_scale);
    for (FpQdqShape* m : members) m->global_scale = g;
  }
}

int signround_tree_levels(int64_t leaves) {
  if (leaves <= 2) return 1;
  return std::max(signround_tree_levels(leaves / 2), 1 + signround_tree_levels(leaves - leaves / 2));
}

double signround_lr(const SignRoundOptions& opt, const QuantFormat& fmt) {
  return opt.lr > 0 ? opt.lr : (opt.iters >= 1000 && fmt.bits <= 3 ? 2.0 : 1.0) / std::max(1, opt.iters);
}

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where each tuned layer's weight gradient dW^ sits in the flat [wsize] partial sums, and after them
// (FP8_STATIC) the dL/ds of its activation QDQ (a, -1: none). A MoE block's experts come last, after
// `shared` entries: a replica whose tree defers the experts (expert_grad_tree.h) needs its scratch
// levels for the shared part only. expert: the layer's cpu::DeferredGrads slot (3 e + 0/1/2 for expert
// e's gate/up/down), -1 for the others.
struct GradLayout {
  std::vector<int64_t> w, a, expert;
  int64_t wsize = 0, shared = 0;
  bool is_expert(size_t l) const { return expert[l] >= 0; }
};

// One leaf's batch positions [p0, p1) on their way through the block: the inputs, the runner's cache,
// the output, and once the loss is taken its gradient (in the FP output's place).
struct LeafPass {
  int64_t p0 = 0, p1 = 0;
  BlockAux<float> aux;
  Tensor x, y, dy;
  BlockRunner<cpu::CpuOps>::Cache cache;
  double loss = 0;  // the leaf's share of the batch loss
};

// One replica of the block under tuning: rank 0 tunes the home block, ranks > 0 a mirror.
// The block's tuned slots point at the fp32 QDQ weights (What); under --amp at the FP weights instead,
// which `operands` maps to the bf16 QDQ weights (Whatb) the GEMMs read (fpb: the untuned Linears),
// packed once per QDQ for every GEMM of the iteration: W^T for the forward, W for the input gradient,
// each by the first GEMM that reads it (PackedB::pack_later: a MoE expert's short products read the
// plain weight, so its packs are never written).
struct Replica {
  Context* ctx = nullptr;
  BlockWeights mirror;
  BlockPtrs<const float*> wp;
  std::vector<TunedLinear> layers;
  std::vector<Tensor> What, Whatb, fpb;
  std::deque<cpu::PackedB> fwd_pack, dx_pack;     // per tuned Linear (dx: none for q/k/v), then per FP one
  cpu::Bf16Operands operands;
  cpu::GradAddends grad_add;  // the tree's pending sums for the running leaf (tree())
  std::vector<const float*> scalar_add;  // the same sums' buffers, for the dL/ds entries (add_scalars)
  ActQdq<float> act;                     // FP8_STATIC: the activation scales of this iteration
  std::vector<Tensor> levels;  // dW^ partial sums of the leaf tree, one per depth
  cpu::DeferredGrads deferred;  // a MoE block's expert products of this iteration's leaves (ops->defer)
  std::vector<LeafPass> staged;  // ops->defer: the leaves, forward done, waiting for the tree's backward
  Tensor total;                // the exchanged dW^ sum (world > 1)
  std::unique_ptr<cpu::CpuOps> ops;
  std::unique_ptr<BlockRunner<cpu::CpuOps>> runner;
  double loss = 0, qdq = 0, forward = 0, backward = 0;
};

uint64_t checksum(const Replica& r) {
  uint64_t h = 1469598103934665603ull;
  auto mix_bytes = [&](const void* raw, size_t n) {
    const auto* p = static_cast<const unsigned char*>(raw);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const auto& L : r.layers) {
    for (const Tensor* t : {&L.V, &L.alpha, &L.beta}) mix_bytes(t->raw(), t->nbytes());
    mix_bytes(&L.act_coef, sizeof L.act_coef);
  }
  return h;
}


// Rows [r0, r0 + rows) of a [n, T, C] calibration tensor (fp32 or bf16) as fp32.
void load_rows(Context& c, const Tensor& t, int64_t r0, int64_t rows, float* dst) {
  if (t.dtype() == DType::BF16) return cpu::bf16_to_fp32(c, t.data<uint16_t>() + r0, dst, rows);
  std::memcpy(dst, t.f32() + r0, size_t(rows) * 4);
}

// The tuning of one block (signround.h): construction builds the replicas, run() iterates.
class BlockTuner {
 public:
  BlockTuner(Context& ctx, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt, const BlockAux<float>& aux,
             const Tensor& x_in, const Tensor& y_fp, const std::vector<uint8_t>& loss_mask,
             const SignRoundOptions& opt, const TuneLane& lane, const LayerFormats* layers)
      : ctx_(ctx), dims_(dims), w_(w), aux_(aux), x_in_(x_in), y_fp_(y_fp), mask_(loss_mask), opt_(opt), lane_(lane),
        fmt_(fmt) {
    n_ = lane.procs ? lane.pool : x_in.dim(0);
    check_shapes();
    const int64_t bs = std::min<int64_t>(opt.batch_size, n_);
    B_ = std::min<int64_t>(n_, bs * std::max(1, opt.gradient_accumulate_steps));
    W_ = lane.group ? lane.world : 1;
    P_ = lane.processes();
    p_ = lane.procs ? lane.procs->rank() : 0;
    AR_CHECK(W_ >= 1 && P_ * W_ <= B_ && (!lane.group || W_ <= lane.group->size()), "tuning world out of range");
    AR_CHECK(!opt.deterministic || B_ % (P_ * W_) == 0, "deterministic tuning needs a world dividing the batch");
    AR_CHECK(!opt.amp || cpu::bf16_gemm_supported(), "amp tuning without bf16 GEMMs");
    leaf_ = opt.deterministic ? 1 : bs;
    int64_t max_leaves = 1;
    for (int r = 0; r < W_; ++r) max_leaves = std::max(max_leaves, leaves_of(r));
    depth_ = signround_tree_levels(max_leaves);
    select_layers(fmt, layers);
    // Every sample of a leaf takes the positions aux gives one sample (aux.pos covers T).
    for (int64_t i = 0; aux_.pos && i < leaf_ * aux_.T; ++i) pos_.push_back(aux_.pos[i % aux_.T]);
    auto t = Clock::now();
    reps_.resize(size_t(W_));
    lane.run([&](int r) { build_replica(r); });
    for (const TunedLinear& L : res_.layers) best_.push_back(snapshot(ctx, L));
    res_.phases.mirrors = since(t);
  }

  BlockTuneResult run();

 private:
  void check_shapes() const {
    const int64_t rows = x_in_.dim(0), T = aux_.T;
    if (x_in_.numel() != rows * T * dims_.C || y_fp_.numel() != x_in_.numel() || int64_t(mask_.size()) != n_ * T ||
        lane_.sample_base + rows > n_)
      fail(ErrorKind::Internal, "signround_tune_block: inconsistent input shapes");
    if (n_ == 0) fail(ErrorKind::InvalidInput, "no calibration samples");
  }
  // Local rank r is global rank p W + r and holds batch positions [pos(r), pos(r + 1)).
  int64_t pos(int r) const { return B_ * (int64_t(p_) * W_ + r) / (int64_t(P_) * W_); }
  int64_t leaves_of(int r) const { return (pos(r + 1) - pos(r) + leaf_ - 1) / leaf_; }

  void select_layers(const QuantFormat& fmt, const LayerFormats* layers);
  void build_replica(int r);
  void qdq_all(Replica& R);
  double run_leaf(Replica& R, int64_t p0, int64_t p1, float* dw, bool accumulate);
  void leaf_inputs(Replica& R, LeafPass& L) const;
  void leaf_loss(Replica& R, LeafPass& L) const;
  BlockPtrs<float*> leaf_grads(Replica& R, float* dw) const;
  void experts_outer(Replica& R, int r);
  double staged_leaf(Replica& R, int64_t i, float* dw, bool accumulate);
  void add_scalars(Replica& R, const float* ds, float* dw, bool accumulate) const;
  double tree(Replica& R, int r, int64_t a, int64_t b, int dst, std::vector<int> pend);
  double loss_tree(int a, int b) const {
    if (b - a == 1) return reps_[size_t(a)].loss;
    return loss_tree(a, (a + b) / 2) + loss_tree((a + b) / 2, b);
  }
  void experts_tree(Replica& R);
  void iteration(int it);
  void exchange();
  void step(Replica& R, const float* dw, float lr, float mm_lr, bool save);
  void step_act(Replica& R, const float* dw, float mm_lr, bool save);
  void restore_best();  // the tunables of the best iteration (saved by step) back into the layers

  Context& ctx_;
  const BlockDims& dims_;
  BlockWeights& w_;
  const BlockAux<float>& aux_;
  const Tensor &x_in_, &y_fp_;
  const std::vector<uint8_t>& mask_;
  const SignRoundOptions& opt_;
  const TuneLane& lane_;
  int64_t n_ = 0, B_ = 0, leaf_ = 1;  // n_: the whole pool (every process's shard)
  bool grad_ = true;                    // this iteration runs backward and step (not only its loss)
  int W_ = 1, P_ = 1, p_ = 0, depth_ = 1;  // local world, processes, this process
  std::vector<size_t> lin_;  // index into block_linears of each tuned layer
  GradLayout g_;
  std::vector<Replica> reps_;
  std::vector<Tunables> best_;  // the tunables at the best iteration (rank 0's)
  std::unique_ptr<parallel::GradExchange> xchg_;
  QuantFormat fmt_;
  std::unique_ptr<StratifiedSampler> sampler_;
  std::vector<int64_t> idx_;  // this iteration's batch: pool indices by position
  std::vector<int32_t> pos_;  // the token positions of a leaf's samples
  double denom_ = 1, best_loss_ = INFINITY;
  BlockTuneResult res_;
};

void BlockTuner::select_layers(const QuantFormat& fmt, const LayerFormats* layers) {
  size_t li = 0;
  for (auto& [name, t] : block_linears(w_)) {
    const size_t slot = li++;
    const auto it = layers ? layers->find(name) : LayerFormats::const_iterator{};
    if (layers && it == layers->end()) continue;
    lin_.push_back(slot);
    res_.layers.push_back(make_tuned_linear(ctx_, name, t, layers ? it->second : fmt));
    if (opt_.fix_params) opt_.fix_params(ctx_, res_.layers.back());
  }
  share_fused_global_scales(res_.layers);
  // linear_slot: the attention module's Linears, then the experts
  const size_t first_expert = dims_.attn_linears(), experts = 3 * w_.eg.size();
  g_.w.assign(res_.layers.size(), 0);
  for (size_t l = 0; l < res_.layers.size(); ++l)
    g_.expert.push_back(lin_[l] >= first_expert && lin_[l] < first_expert + experts ? int64_t(lin_[l] - first_expert)
                                                                                    : -1);
  for (bool experts_now : {false, true}) {
    for (size_t l = 0; l < res_.layers.size(); ++l) {
      if (g_.is_expert(l) != experts_now) continue;
      g_.w[l] = g_.wsize;
      g_.wsize += res_.layers[l].weight->numel();
    }
    if (!experts_now) g_.shared = g_.wsize;
  }
  for (size_t l = 0; l < res_.layers.size(); ++l) g_.a.push_back(fmt.act_static() ? g_.wsize++ : -1);
  if (W_ > 1) xchg_ = std::make_unique<parallel::GradExchange>(W_, g_.wsize, parallel::GradExchange::Mode::Values);
}

// Rank 0 works on the home block; ranks > 0 build mirrors on their own device (first touch).
void BlockTuner::build_replica(int r) {
  Replica& R = reps_[size_t(r)];
  R.ctx = lane_.group ? &lane_.ctx(r) : &ctx_;
  Context& c = *R.ctx;
  const size_t nl = lin_.size();
  BlockWeights* bw = &w_;
  if (r == 0) {
    R.layers = res_.layers;  // shares the home tensors (same objects' storage)
  } else {
    R.mirror = clone_block(w_, c);
    bw = &R.mirror;
    auto mine = block_linears(R.mirror);
    for (size_t l = 0; l < nl; ++l) {
      const TunedLinear& H = res_.layers[l];
      TunedLinear L;
      L.name = H.name;
      L.shape = H.shape;
      L.fixed = H.fixed;
      L.fp = H.fp;
      L.weight = mine[lin_[l]].second;
      L.act_max = H.act_max;
      L.act_coef = H.act_coef;
      for (auto [dst, src] : {std::pair{&L.V, &H.V}, {&L.alpha, &H.alpha}, {&L.beta, &H.beta}, {&L.wmin0, &H.wmin0},
                              {&L.wmax0, &H.wmax0}, {&L.scale, &H.scale}, {&L.zero, &H.zero}})
        *dst = src->clone(c);
      R.layers.push_back(std::move(L));
    }
  }
  R.wp = bw->ptrs();
  // The slot keeps the FP weight's address, bound to the bf16 weight and its packed operands; q/k/v
  // read the block input, whose gradient is never needed here: no input-gradient operand.
  auto bind = [&](size_t slot, const Tensor& W, const Tensor& Wb) {
    R.fwd_pack.emplace_back();
    R.dx_pack.emplace_back();
    R.operands.bind(W.f32(), {Wb.data<uint16_t>(), &R.fwd_pack.back(), slot < 3 ? nullptr : &R.dx_pack.back()});
  };
  for (size_t l = 0; l < nl; ++l) {
    const Tensor& W = *R.layers[l].weight;
    if (opt_.amp) {
      R.Whatb.push_back(Tensor::empty(W.shape(), DType::BF16, c));
      bind(lin_[l], W, R.Whatb.back());
    } else {
      R.What.push_back(Tensor::empty(W.shape(), DType::F32, c));
      linear_slot(R.wp, lin_[l]) = R.What.back().f32();  // the block runs on the QDQ weights
    }
  }
  if (opt_.amp) {  // the Linears kept in FP: rounded to bf16 once
    auto all = block_linears(*bw);
    for (size_t s = 0; s < all.size(); ++s) {
      if (std::find(lin_.begin(), lin_.end(), s) != lin_.end()) continue;
      const Tensor& W = *all[s].second;
      R.fpb.push_back(Tensor::empty(W.shape(), DType::BF16, c));
      uint16_t* Wb = R.fpb.back().data<uint16_t>();
      cpu::fp32_to_bf16(c, W.f32(), Wb, W.numel());
      bind(s, W, R.fpb.back());
      R.fwd_pack.back().pack_later(Wb, W.dim(0), W.dim(1), true);
      if (s >= 3) R.dx_pack.back().pack_later(Wb, W.dim(0), W.dim(1), false);
    }
  }
  // A rank of several leaves in a MoE block defers its experts' weight gradients to one tree per expert
  // after its last leaf (expert_grad_tree.h): its scratch levels hold the other Linears only.
  const bool defer = leaves_of(r) > 1 && g_.shared < g_.wsize && !fmt_.act_static();
  for (int d = 0; d < depth_; ++d)
    R.levels.push_back(Tensor::empty({std::max<int64_t>(d > 0 && defer ? g_.shared : g_.wsize, 1)}, DType::F32, c));
  if (W_ > 1) R.total = Tensor::empty({std::max<int64_t>(g_.wsize, 1)}, DType::F32, c);
  R.ops = std::make_unique<cpu::CpuOps>(
      cpu::CpuOps{c, opt_.amp ? &R.operands : nullptr, &R.grad_add, defer ? &R.deferred : nullptr});
  R.ops->keep_fp32 = fmt_.act_static();  // the activation QDQ reads the Linears' fp32 inputs
  R.ops->pack_operands = !opt_.amp;      // q, k, v's weight gradients read one pack of their x
  // World-invariant bits in fp32: the experts' GEMMs on row-independent kernels, so that experts_outer
  // stacks a rank's leaves into one GEMM per expert (--amp: each leaf's own GEMMs, cpu_ops.h).
  R.ops->expert_row_gemms = opt_.deterministic;
  if (fmt_.act_static()) R.act.s.assign(block_linears(*bw).size(), 0.f);  // by linear_slot
  R.runner = std::make_unique<BlockRunner<cpu::CpuOps>>(*R.ops, dims_);
  if (xchg_) xchg_->attach(r, R.levels[0].f32(), R.total.f32());
}

void BlockTuner::qdq_all(Replica& R) {
  for (size_t l = 0; l < R.layers.size(); ++l) {
    auto& L = R.layers[l];
    if (g_.a[l] >= 0) R.act.s[lin_[l]] = fp8_static_input_scale(L.act_max * L.act_coef);
    family(L).qdq(*R.ctx, L, opt_.amp ? nullptr : R.What[l].f32(), opt_.amp ? R.Whatb[l].data<uint16_t>() : nullptr);
    if (!opt_.amp) continue;
    const uint16_t* Wb = R.Whatb[l].data<uint16_t>();
    R.fwd_pack[l].pack_later(Wb, L.weight->dim(0), L.weight->dim(1), true);
    if (lin_[l] >= 3) R.dx_pack[l].pack_later(Wb, L.weight->dim(0), L.weight->dim(1), false);
  }
}

// One leaf: batch positions [p0, p1) through forward + loss + backward; the weight gradients dW^ of the
// tuned layers go to `dw` (layout g_.w), or are added to it (accumulate). Returns the leaf's loss share.
double BlockTuner::run_leaf(Replica& R, int64_t p0, int64_t p1, float* dw, bool accumulate) {
  LeafPass L;
  L.p0 = p0, L.p1 = p1;
  leaf_inputs(R, L);
  auto tf = Clock::now();
  R.runner->forward(R.wp, L.aux, L.x.f32(), L.y.f32(), L.cache, nullptr, fmt_.act_static() ? &R.act : nullptr);
  leaf_loss(R, L);
  R.forward += since(tf);
  if (!grad_) return L.loss;
  auto tb = Clock::now();
  std::vector<float> ds(R.act.s.size());  // FP8_STATIC: dL/ds by linear_slot
  if (R.ops->defer) R.deferred.begin_leaf(3 * int64_t(R.wp.eg.size()));
  R.runner->backward(R.wp, L.aux, L.cache, L.dy.f32(), nullptr, leaf_grads(R, dw), accumulate, ds.data());
  if (fmt_.act_static()) add_scalars(R, ds.data(), dw, accumulate);
  R.backward += since(tb);
  return L.loss;
}

// The leaf's block input and FP output rows (into L.x and L.dy), and room for its output.
void BlockTuner::leaf_inputs(Replica& R, LeafPass& L) const {
  Context& c = *R.ctx;
  const int64_t Bm = L.p1 - L.p0, T = aux_.T, C = dims_.C;
  L.x = Tensor::empty({Bm * T, C}, DType::F32, c);
  L.y = Tensor::empty({Bm * T, C}, DType::F32, c);
  L.dy = Tensor::empty({Bm * T, C}, DType::F32, c);
  for (int64_t b = 0; b < Bm; ++b) {
    const int64_t s = idx_[size_t(L.p0 + b)] - lane_.sample_base;  // a row of this process's shard
    load_rows(c, x_in_, s * T * C, T * C, L.x.f32() + b * T * C);
    load_rows(c, y_fp_, s * T * C, T * C, L.dy.f32() + b * T * C);
  }
  L.aux = aux_;
  L.aux.B = Bm;
  L.aux.pos = aux_.pos ? pos_.data() : nullptr;
}

// The leaf's loss share, and its gradient in place of the FP output: per token row on the pool, the
// rows' sums then added in row order (the same bits for any thread count).
void BlockTuner::leaf_loss(Replica& R, LeafPass& L) const {
  const int64_t rows = (L.p1 - L.p0) * aux_.T, T = aux_.T, C = dims_.C;
  std::vector<double> row_loss(static_cast<size_t>(rows));
  R.ctx->pool().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const bool on = mask_[size_t(idx_[size_t(L.p0 + row / T)] * T + row % T)] != 0;
      const float* yr = L.y.f32() + row * C;
      float* dr = L.dy.f32() + row * C;
      double sum = 0;
      for (int64_t k = 0; k < C; ++k) {
        const double d = on ? double(yr[k]) - double(dr[k]) : 0.0;
        sum += d * d;
        dr[k] = float(2.0 * d / denom_);
      }
      row_loss[size_t(row)] = sum;
    }
  }, 16);
  double loss = 0;
  for (double l : row_loss) loss += l;
  L.loss = loss / denom_;
}

// Where a leaf's weight gradients go: the tuned layers' entries of dw; FP layers get none; a deferred
// expert's pointer only marks its gradient as wanted (its products go to R.deferred).
BlockPtrs<float*> BlockTuner::leaf_grads(Replica& R, float* dw) const {
  BlockPtrs<float*> gp;
  gp.same_kind(R.wp);
  for (auto* v : {&gp.eg, &gp.eu, &gp.ed}) v->assign(R.wp.eg.size(), nullptr);
  for (size_t l = 0; l < lin_.size(); ++l)
    linear_slot(gp, lin_[l]) = (R.ops->defer && g_.is_expert(l) ? R.levels[0].f32() : dw) + g_.w[l];
  return gp;
}

// A rank of several leaves in a MoE block, with world-invariant bits in fp32 (ops->experts_stack_rows),
// runs its experts outermost: every leaf's attention and routing, then each expert once over every
// leaf's rows stacked (MoeFfn::run_experts: row-independent GEMMs, so each row has the bits of its
// leaf's own call), then each leaf's output and loss; with gradients, the experts' backward the same
// way (their weight-gradient products deferred per leaf, on each leaf's rows). The rest of each leaf's
// backward waits for the tree (staged_leaf), whose order fixes the addends. The bits are run_leaf's:
// an expert's GEMMs get ~8x the rows of one sample's (measured in docs/moe.md, "Speed"). Under --amp the
// bf16 GEMMs' rows depend on the call's other rows, so leaves run one by one (run_leaf): the order alone
// gained nothing and held ~1 GB more.
void BlockTuner::experts_outer(Replica& R, int r) {
  const int64_t n = leaves_of(r), p0 = pos(r);
  R.staged.clear();
  R.staged.resize(size_t(n));  // not resized again: the caches point into each other
  std::vector<MoeFfn<cpu::CpuOps>::Cache*> moe;
  auto tf = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    LeafPass& L = R.staged[size_t(i)];
    L.p0 = p0 + i * leaf_;
    L.p1 = std::min(pos(r + 1), L.p0 + leaf_);
    leaf_inputs(R, L);
    R.runner->forward_to_experts(R.wp, L.aux, L.x.f32(), L.y.f32(), L.cache);
    L.cache.moe.leaf = i;
    moe.push_back(&L.cache.moe);
  }
  R.runner->moe().run_experts(R.wp, moe);
  for (LeafPass& L : R.staged) {
    R.runner->forward_from_experts(R.wp, L.aux, L.y.f32(), L.cache);
    leaf_loss(R, L);
  }
  R.forward += since(tf);
  if (!grad_) return;
  auto tb = Clock::now();
  for (LeafPass& L : R.staged) {
    R.deferred.begin_leaf(3 * int64_t(R.wp.eg.size()));
    R.runner->backward_to_experts(L.aux, L.cache, L.dy.f32());
  }
  R.runner->moe().expert_grads(R.wp, moe, leaf_grads(R, R.levels[0].f32()), false, nullptr);
  R.backward += since(tb);
}

// Leaf i of experts_outer: the rest of its backward (as run_leaf's), then its buffers are released.
double BlockTuner::staged_leaf(Replica& R, int64_t i, float* dw, bool accumulate) {
  LeafPass& L = R.staged[size_t(i)];
  if (grad_) {
    auto tb = Clock::now();
    R.runner->backward_from_experts(R.wp, L.aux, L.cache, L.dy.f32(), nullptr, leaf_grads(R, dw), accumulate);
    R.backward += since(tb);
  }
  const double loss = L.loss;
  L = LeafPass{};
  return loss;
}

// The leaf's dL/ds (per block slot) into dw's scalar entries with the additions the dW GEMMs make:
// (dw + leaf, or the leaf alone) then the pending subtree sums in gemm's `add` order, each rounded once.
void BlockTuner::add_scalars(Replica& R, const float* ds, float* dw, bool accumulate) const {
  for (size_t l = 0; l < lin_.size(); ++l) {
    if (g_.a[l] < 0) continue;
    const int64_t k = g_.a[l];
    float v = accumulate ? dw[k] + ds[lin_[l]] : ds[lin_[l]];
    for (const float* add : R.scalar_add) v += add[k];
    dw[k] = v;
  }
}

// The fixed tree over leaves [a, b) of rank r: dW^ = fl(sum(left half) + sum(right half)), recursively,
// written to levels[dst], then the pending subtree sums `pend` added innermost (last) first.
// No pass of its own over the gradient: every addition happens inside a dW GEMM (gemm's beta = 1 and
// addends add finished products in one rounding each, cpu::gemm): the left half goes to a free buffer
// X, and the right half's last leaf adds X (and the pending sums) as it writes its own. A pair of
// leaves shares one buffer (the second leaf's GEMMs add to the first's gradient). While the left half
// runs, every buffer but the pending ones is free, dst included; buffers: signround_tree_levels.
double BlockTuner::tree(Replica& R, int r, int64_t a, int64_t b, int dst, std::vector<int> pend) {
  const int64_t p0 = pos(r);
  auto leaf = [&](int64_t i, bool accumulate, const std::vector<int>& adds) {
    R.grad_add.clear();
    for (size_t l = 0; l < lin_.size(); ++l) {
      if (R.ops->defer && g_.is_expert(l)) continue;
      std::vector<const float*> m;
      for (auto x = adds.rbegin(); x != adds.rend(); ++x) m.push_back(R.levels[size_t(*x)].f32() + g_.w[l]);
      if (!m.empty()) R.grad_add.set(R.levels[size_t(dst)].f32() + g_.w[l], std::move(m));
    }
    R.scalar_add.clear();
    for (auto x = adds.rbegin(); x != adds.rend(); ++x) R.scalar_add.push_back(R.levels[size_t(*x)].f32());
    float* dw = R.levels[size_t(dst)].f32();
    if (!R.staged.empty()) return staged_leaf(R, i, dw, accumulate);
    return run_leaf(R, p0 + i * leaf_, std::min(pos(r + 1), p0 + (i + 1) * leaf_), dw, accumulate);
  };
  if (b - a == 1) return leaf(a, false, pend);
  if (b - a == 2) {
    const double left = leaf(a, false, {});
    return left + leaf(a + 1, true, pend);
  }
  const int64_t mid = (a + b) / 2;
  int x = 0;  // the left half's buffer: neither dst nor pending
  while (x == dst || std::find(pend.begin(), pend.end(), x) != pend.end()) ++x;
  const double left = tree(R, r, a, mid, x, {});
  pend.push_back(x);
  return left + tree(R, r, mid, b, dst, std::move(pend));
}

// The tunables' gradients from the batch's dW^ (one QDQ backward per iteration, as autograd does it),
// then sign-SGD: p -= rate * sign(dp), through each Linear's family (linear_family.h). Every rank
// computes the same bits from the same dW^. save: this iteration is the best so far; its tunables go to
// best_ as each unit is read for its update (rank 0's replica, whose layers are the home block's).
void BlockTuner::step(Replica& R, const float* dw, float lr, float mm_lr, bool save) {
  const StepRates rates{lr, mm_lr, opt_.enable_minmax_tuning};
  bool finite = true;
  for (size_t l = 0; l < R.layers.size(); ++l)
    finite &= step_linear(*R.ctx, R.layers[l], dw + g_.w[l], rates, save ? &best_[l] : nullptr);
  if (fmt_.act_static()) step_act(R, dw, mm_lr, save);
  if (!finite) fail(ErrorKind::InvalidInput, "non-finite gradient of the tunables");
}

// FP8_STATIC's coefficients of the activation maxima, as AutoRound tunes act_max_scale: in the min/max
// group (so not with --disable_minmax_tuning), its gradient dL/ds * act_max / 448 where the scale is
// strictly above vLLM's floor (torch's clip passes none at its bound) and 0 elsewhere; kept in [0, 1].
void BlockTuner::step_act(Replica& R, const float* dw, float mm_lr, bool save) {
  for (size_t l = 0; l < R.layers.size(); ++l) {
    TunedLinear& L = R.layers[l];
    if (save) best_[l].act_coef = L.act_coef;
    if (!opt_.enable_minmax_tuning) continue;
    const float d = dw[g_.a[l]];
    if (!std::isfinite(d)) fail(ErrorKind::InvalidInput, "non-finite gradient of " + L.name + "'s activation scale");
    if (!(L.act_max * L.act_coef / kE4M3Max > fp8_static_input_scale(0.f))) continue;
    L.act_coef = coef_step_value(L.act_coef, d, mm_lr);
  }
}

void BlockTuner::restore_best() {
  for (size_t l = 0; l < res_.layers.size(); ++l) restore(res_.layers[l], best_[l]);
}

// The batch's dW^: the tree over this process's ranks (in-process exchange), then over the processes
// (one fp32 sum over the network, into local rank 0's buffer, copied to the other local ranks).
void BlockTuner::exchange() {
  auto& ph = res_.phases;
  auto tx = Clock::now();
  if (xchg_) {
    lane_.run([&](int r) { xchg_->reduce_scatter(r, &reps_[size_t(r)].ctx->pool()); });
    lane_.run([&](int r) { xchg_->all_gather(r); });
    ph.exchange_bytes += xchg_->bytes_per_rank();
  }
  if (lane_.procs) {
    float* g = W_ > 1 ? reps_[0].total.f32() : reps_[0].levels[0].f32();
    const int64_t before = lane_.procs->bytes_received();
    lane_.procs->sum_tree(g, g_.wsize);
    ph.exchange_bytes += lane_.procs->bytes_received() - before;
    if (W_ > 1) lane_.run([&](int r) {
        if (r > 0) std::memcpy(reps_[size_t(r)].total.f32(), g, size_t(g_.wsize) * sizeof(float));
      });
  }
  ph.exchange += since(tx);
}

// The deferred experts' tree (expert_grad_tree.h) into the rank's root sums, timed as backward.
void BlockTuner::experts_tree(Replica& R) {
  auto tb = Clock::now();
  std::vector<ExpertGradTarget> t;
  for (size_t l = 0; l < lin_.size(); ++l)
    if (g_.is_expert(l))
      t.push_back({g_.expert[l], R.layers[l].weight->dim(0), R.layers[l].weight->dim(1),
                   R.levels[0].f32() + g_.w[l]});
  expert_grad_tree(*R.ops, R.deferred, t);
  R.deferred.clear();
  R.backward += since(tb);
}

void BlockTuner::iteration(int it) {
  auto& ph = res_.phases;
  const auto t_it = Clock::now();
  idx_ = sampler_->batch(it);
  // With use_best_mse the last iteration's step is never read (the result is the best iterate, and the
  // stepped one is never evaluated): that iteration only measures its loss, with no backward or step.
  grad_ = !(opt_.use_best_mse && it == opt_.iters - 1);
  int64_t valid = 0;
  for (int64_t s : idx_)
    for (int64_t t = 0; t < aux_.T; ++t) valid += mask_[size_t(s * aux_.T + t)] != 0;
  denom_ = double(std::max<int64_t>(valid, 1)) * double(dims_.C);
  lane_.run([&](int r) {
    Replica& R = reps_[size_t(r)];
    auto tq = Clock::now();
    qdq_all(R);
    R.qdq += since(tq);
    if (R.ops->defer && R.ops->experts_stack_rows()) experts_outer(R, r);
    R.loss = tree(R, r, 0, leaves_of(r), 0, {});
    R.staged.clear();
    if (!std::isfinite(R.loss)) fail(ErrorKind::InvalidInput, "non-finite loss at iteration " + std::to_string(it));
    if (R.ops->defer && grad_) experts_tree(R);
  });
  double loss = loss_tree(0, W_);
  if (lane_.procs) loss = lane_.procs->sum_tree(loss);  // the tree's top levels span the processes
  const bool best = res_.record_loss(it, loss, best_loss_);
  if (grad_) {
    if (xchg_ || lane_.procs) exchange();
    auto ts = Clock::now();
    const double decay = 1.0 - double(it) / opt_.iters;
    const double lr = signround_lr(opt_, fmt_), mm_lr = opt_.minmax_lr > 0 ? opt_.minmax_lr : lr;
    lane_.run([&](int r) {
      Replica& R = reps_[size_t(r)];
      step(R, W_ > 1 ? R.total.f32() : R.levels[0].f32(), float(lr * decay), float(mm_lr * decay), best && r == 0);
    });
    ph.step += since(ts);
  }
  if (it == 0) ph.warmup = since(t_it);
  if (opt_.on_step) {
    std::vector<uint64_t> sums(static_cast<size_t>(W_));
    for (int r = 0; r < W_; ++r) sums[size_t(r)] = checksum(reps_[size_t(r)]);
    opt_.on_step(it, sums);
  }
  if (opt_.progress) opt_.progress(it + 1, opt_.iters, loss, best_loss_);
}

BlockTuneResult BlockTuner::run() {
  sampler_ = std::make_unique<StratifiedSampler>(n_, B_, opt_.seed);
  for (int it = 0; it < opt_.iters; ++it) iteration(it);
  auto& ph = res_.phases;
  ph.qdq = reps_[0].qdq;
  ph.forward = reps_[0].forward;
  ph.backward = reps_[0].backward;
  auto t_down = Clock::now();
  if (lane_.parallel()) lane_.run([&](int r) {
      if (r > 0) reps_[size_t(r)] = Replica{};  // mirrors are freed on their own device's thread
    });
  res_.loss_best = opt_.iters > 0 ? best_loss_ : 0;
  // The last iterate is the best one only if its loss-only iteration said so; it is then still live:
  // its tensors are the home block's, and its coefficients (plain values) come back from rank 0.
  if (opt_.use_best_mse && opt_.iters > 0 && res_.best_iter != opt_.iters - 1) restore_best();
  else
    for (size_t l = 0; l < res_.layers.size(); ++l) res_.layers[l].act_coef = reps_[0].layers[l].act_coef;
  // The home block's weights become their fp32 QDQ values (also under --amp: bf16 was only the operand).
  for (auto& L : res_.layers) {
    if (fmt_.act_static()) L.input_scale = fp8_static_input_scale(L.act_max * L.act_coef);
    Tensor What = Tensor::empty(L.weight->shape(), DType::F32, ctx_);
    family(L).qdq(ctx_, L, What.f32(), nullptr);
    *L.weight = What;
  }
  ph.teardown = since(t_down);
  return std::move(res_);
}

}  // namespace

BlockTuneResult signround_tune_block(Context& ctx, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt,
                                     const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp,
                                     const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                     const TuneLane& lane, const LayerFormats* layers) {
  return BlockTuner(ctx, dims, w, fmt, aux, x_in, y_fp, loss_mask, opt, lane, layers).run();
}

}  // namespace ar::quant
