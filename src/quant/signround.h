// SignRound V1 block tuning (autoround-spec.md §3), serial or data-parallel over the ranks of a
// ReplicaGroup. For every Linear of one decoder block it tunes rounding offsets V and (optionally)
// min/max scales alpha, beta with sign-SGD so that the block's output on quantized weights matches the
// FP block's output:
//   for i in 0..iters-1:
//     batch = stratified sample of B = bs*GAS pool indices (position j from stratum j, DESIGN §5)
//     every rank r (ranks own positions [rB/W, (r+1)B/W)): W^ = QDQ(W, V, alpha, beta) per layer;
//       per leaf (one sample if deterministic, else a micro-batch of <= bs): y = Block(W^)(x_in[leaf]),
//       L_leaf = sum of squared errors vs y_fp over valid tokens / (valid tokens of the batch * C),
//       G_leaf = d L_leaf / d W^ (the weight gradients); leaves combine by a fixed binary tree over
//       positions
//     L = tree sum over ranks; if L < best: snapshot (V, alpha, beta), i* = i (loss before the step)
//     exchange: G = tree sum over ranks of the ranks' G (fp32, parallel/exchange.h), the same on every rank
//     every rank: g = QDQ backward of G (one per iteration, as autograd computes it for the whole batch);
//       p -= lr_i sign(g), lr_i = lr (1 - i/iters)
//   restore the snapshot at i* (unless use_best is off); W <- QDQ(W, V, alpha, beta) on the home block
// FP8_STATIC (QuantFormat::act_static): every tuned Linear also reads its input through the E4M3 QDQ at
// s = max(act_max * c / 448, floor) (block_impl.h ActQdq), and c (TunedLinear::act_coef) is stepped like
// a max-scale coefficient from dL/ds, which rides in the exchanged gradient after the dW^ entries.
// Deterministic mode (the default) makes the gradient's bits independent of the world: leaves are single
// samples and the same tree sums them whatever rank holds them, so worlds 1, 2, 4 write identical files.
// Rank 0 tunes the home block in place; ranks > 0 tune mirrors (deep copies made on their own device)
// that are dropped at the end. Replicas stay bit-identical: same start, same signs, same update.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/block_impl.h"
#include "model/loader.h"
#include "parallel/process_link.h"
#include "parallel/replica_group.h"
#include "quant/qdq.h"
#include "quant/qdq_fixed.h"
#include "quant/qdq_fp.h"

namespace ar::quant {

// The weight scheme of a run: integers (qdq.h: bits, group_size, sym) or one of the floating-point
// families (qdq_fp.h: `fp` set; bits 4 -> E2M1 and 8 -> E4M3 elements, group_size as AutoRound's
// reshape takes it, block_rows > 0 for FP8_BLOCK's 2-D tiles).
struct QuantFormat {
  QuantFormat(int b = 4, int64_t g = 128, bool s = true) : bits(b), group_size(g), sym(s) {}
  int bits = 4;
  int64_t group_size = 128;
  bool sym = true;
  std::optional<FpFamily> fp;
  int64_t block_rows = 0;
  // 8: FP8_STATIC's activations, E4M3 with one static scale per Linear input (its calibration maximum
  // / 448, written as input_scale); 16: weight-only.
  int act_bits = 16;
  bool is_float() const { return fp.has_value(); }
  bool act_static() const { return act_bits == 8; }
};
// The float tile shape of `fmt` for a weight [out, in] (fmt.fp set).
FpQdqShape fp_shape(const QuantFormat& fmt, int64_t out, int64_t in);

struct TunedLinear;

struct SignRoundOptions {
  int iters = 200;
  double lr = 0, minmax_lr = 0;  // 0: auto (1/iters; 2/iters if iters >= 1000 and bits <= 3)
  int64_t batch_size = 8;
  int gradient_accumulate_steps = 1;
  bool enable_minmax_tuning = true;
  bool use_best_mse = true;
  uint64_t seed = 42;
  bool deterministic = true;  // per-sample leaves: the result does not depend on the world
  // --amp: the block's GEMMs take bf16 operands with fp32 accumulation (the QDQ weights are written in
  // bf16 directly); QDQ, norms, attention, the loss and all tunables stay fp32. Needs
  // cpu::bf16_gemm_supported(). x_in / y_fp may be stored in bf16 either way.
  bool amp = false;
  // Called after every step with this iteration's loss and the best so far.
  std::function<void(int /*iteration*/, int /*iters*/, double /*loss*/, double /*best*/)> progress;
  // Called for every tuned Linear after its tunables are made (e.g. the GGUF output fixing its scales:
  // TunedLinear::fixed).
  std::function<void(Context&, TunedLinear&)> fix_params;
  // Test/diagnostic observer: after every step, a checksum of each replica's (V, alpha, beta).
  std::function<void(int /*iteration*/, const std::vector<uint64_t>&)> on_step;
};

// Where a block's work runs: serially on the caller's context, or on `world` ranks of a group
// (rank r on group member members[r]; members empty: members 0..world-1).
// In a multi-process job (procs set), this process holds only its shard of the calibration pool: x_in /
// y_fp rows are pool samples [sample_base, sample_base + rows), the loss mask covers the whole pool of
// `pool` samples, and the global world is procs->size() x world (process-major ranks).
struct TuneLane {
  parallel::ReplicaGroup* group = nullptr;
  int world = 1;
  std::vector<int> members;
  parallel::ProcessLink* procs = nullptr;
  int64_t sample_base = 0, pool = 0;
  int processes() const { return procs ? procs->size() : 1; }
  bool parallel() const { return group && world > 1; }
  int member(int rank) const { return members.empty() ? rank : members[size_t(rank)]; }
  Context& ctx(int rank) const { return group->ctx(member(rank)); }
  // fn(rank) on every rank (fork-join; see ReplicaGroup::run); serial lanes call fn(0) here.
  void run(const std::function<void(int)>& fn) const;
};

// Seconds per phase of the tuning loop (summed over iterations; forward/backward/qdq are rank 0's,
// the others walls of the whole lane). exchange_bytes: what one rank read from the others, in total.
struct TunePhases {
  double mirrors = 0, warmup = 0, qdq = 0, forward = 0, backward = 0, exchange = 0, step = 0, teardown = 0;
  int64_t exchange_bytes = 0;
};

// Tunable state of one wrapped Linear.
struct TunedLinear {
  std::string name;
  QdqShape shape;
  // GGUF types (qdq_fixed.h): per-group scale and offset fixed before tuning, held in `scale` and
  // `zero`; only V ([out, in]) is tuned.
  std::optional<FixedQdq> fixed;
  // Float schemes (qdq_fp.h): V [out, padded_in] and the max-scale coefficient `beta` (one per tile)
  // are tuned, as AutoRound's wrapper tunes value and max_scale (its min_scale gets no gradient);
  // wmax0 holds each tile's max|w|, wmin0 the search's init coefficient (1 without one), alpha is
  // unused (ones), `scale` gets the tile scales (MX: exponent, NVFP4: e4m3 S, FP8: s).
  std::optional<FpQdqShape> fp;
  Tensor* weight = nullptr;  // the FP weight [out, in], replaced by its QDQ value at the end
  Tensor V, alpha, beta, wmin0, wmax0, scale, zero;
  // QuantFormat::act_static: the calibration maximum |x| of the Linear's input (set by fix_params), the
  // tuned coefficient of it (AutoRound's act_max_scale, in [0, 1], stepped with the min/max rate), and
  // the activation scale written beside the weight, fp8_static_input_scale(act_max * act_coef).
  float act_max = 0, act_coef = 1;
  float input_scale = 0;
};

struct BlockTuneResult {
  double loss_first = 0, loss_best = 0, loss_last = 0;
  int best_iter = -1;
  TunePhases phases;
  std::vector<TunedLinear> layers;  // final V/alpha/beta/scale/zero per Linear (for packing)
  // Records iteration `it`'s loss (first, last; best and its iteration while it improves on `best`,
  // the best so far, which it lowers); true if this iteration is the best so far.
  bool record_loss(int it, double loss, double& best) {
    if (it == 0) loss_first = loss;
    loss_last = loss;
    if (!(loss < best)) return false;
    best = loss;
    best_iter = it;
    return true;
  }
};

// The Linears a tuning quantizes, by short name (self_attn.q_proj, mlp.experts.3.down_proj), each with
// its format (--layer_config gives single Linears their own bits, group size or sym); a Linear not
// listed keeps its FP weight and takes part in the block forward unchanged.
using LayerFormats = std::map<std::string, QuantFormat>;

// x_in, y_fp: [n, T, C] fp32 or bf16; loss_mask: [n * T] (1 = token counts in the loss).
// `layers` selects the Linears to quantize and their formats (null: all of block_linears, in `fmt`);
// `fmt` is the run's scheme (the learning rate's, FP8_STATIC's activations).
// aux.B/aux.T describe one sample (B is overwritten per micro-batch); positions/rope cover T.
BlockTuneResult signround_tune_block(Context& ctx, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt,
                                     const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp,
                                     const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                     const TuneLane& lane = {}, const LayerFormats* layers = nullptr);

// The Linears of a block that AutoRound quantizes, with their HF short names, in linear_slot order
// (model/block_dims.h): q, k, v, o, then the dense MLP's gate, up, down, or a MoE block's experts
// (mlp.experts.<e>.gate_proj ..., Mixtral block_sparse_moe.experts.<e>.w1/w3/w2) and shared expert. A
// MoE router and shared_expert_gate are not among them: AutoRound keeps .gate and .shared_expert_gate
// in 16 bit for MoE models.
std::vector<std::pair<std::string, Tensor*>> block_linears(BlockWeights& w);
std::vector<std::pair<std::string, const Tensor*>> block_linears(const BlockWeights& w);

// A Linear's tunables at their start: V = 0, alpha = beta = 1, the groups' min/max of `weight`.
TunedLinear make_tuned_linear(Context& ctx, const std::string& name, Tensor* weight, const QuantFormat& fmt);
// NVFP4's fused layers (AutoRound's update_fused_layer_global_scales, what vLLM's fused QKV and
// gate-up kernels need): the tuned q/k/v projections share the smallest of their global scales, and
// gate/up theirs, per MLP (each expert's and the shared expert's gate/up pair apart). Call after make_tuned_linear, before the first QDQ; other layers are left as they are.
void share_fused_global_scales(std::vector<TunedLinear>& layers);
// The learning rate of V: --lr, or 1/iters (2/iters for iters >= 1000 at <= 3 bits).
double signround_lr(const SignRoundOptions& opt, const QuantFormat& fmt);
// Gradient buffers of the deterministic tree over `leaves` per-sample leaves: a pair of leaves sums in
// one buffer (the second leaf's dW GEMMs add to it), the right half of a larger range in the next.
int signround_tree_levels(int64_t leaves);

// A deep copy of a block's tensors on `ctx` (a mirror).
BlockWeights clone_block(const BlockWeights& w, Context& ctx);

// The stratified sampler: the pool [0, n) cut into B contiguous strata S_j = [j n / B, (j+1) n / B);
// batch i takes from each stratum the element i mod |S_j| of a permutation of S_j drawn from
// (seed, j, epoch = i / |S_j|). Position j of every batch comes from stratum j, whatever the world.
class StratifiedSampler {
 public:
  StratifiedSampler(int64_t n, int64_t batch, uint64_t seed);
  std::vector<int64_t> batch(int64_t iteration);

 private:
  struct Stratum {
    int64_t begin = 0, len = 0, epoch = -1;
    std::vector<int64_t> perm;
  };
  uint64_t seed_;
  std::vector<Stratum> strata_;
};

}  // namespace ar::quant
