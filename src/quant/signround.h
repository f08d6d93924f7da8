// SignRound V1 block tuning (autoround-spec.md §3), serial and parallel-unaware. For every Linear of
// one decoder block it tunes rounding offsets V and (optionally) min/max scales alpha, beta with
// sign-SGD so that the block's output on quantized weights matches the FP block's output:
//   for i in 0..iters-1:
//     batch = sampler.next()                      (seeded reshuffling cyclic sampler, size bs*GAS)
//     W^ = QDQ(W, V, alpha, beta) per layer; y = Block(W^)(x_in[batch]) per micro-batch of bs
//     L = masked mean squared error(y, y_fp[batch]) over valid tokens (fp32)
//     if L < best: snapshot (V, alpha, beta), i* = i          (loss measured before the step)
//     hooks.sync(gradients); p -= lr_i sign(dL/dp), lr_i = lr (1 - i/iters)
//   restore the snapshot at i* (unless use_best is off); W <- QDQ(W, V, alpha, beta)
// The hooks are the seams for the data-parallel lane (mirror setup, work dispatch, gradient sync,
// teardown); the serial run uses no-ops.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/block_impl.h"
#include "model/loader.h"
#include "quant/qdq.h"

namespace ar::quant {

struct QuantFormat {
  int bits = 4;
  int64_t group_size = 128;
  bool sym = true;
};

struct SignRoundOptions {
  int iters = 200;
  double lr = 0, minmax_lr = 0;  // 0: auto (1/iters; 2/iters if iters >= 1000 and bits <= 3)
  int64_t batch_size = 8;
  int gradient_accumulate_steps = 1;
  bool enable_minmax_tuning = true;
  bool use_best_mse = true;
  uint64_t seed = 42;
  std::function<void(int /*iteration*/, int /*iters*/)> progress;  // called after every step
};

// Seconds spent per phase of the tuning loop (summed over iterations).
struct TunePhases {
  double qdq = 0, forward = 0, backward = 0, step = 0;
};

// Tunable state of one wrapped Linear.
struct TunedLinear {
  std::string name;
  QdqShape shape;
  Tensor* weight = nullptr;  // the FP weight [out, in], replaced by its QDQ value at the end
  Tensor V, alpha, beta, wmin0, wmax0, scale, zero;
};

// Seams for the parallel lane; every call is a no-op in serial runs.
class TuneHooks {
 public:
  virtual ~TuneHooks() = default;
  virtual void setup(std::vector<TunedLinear>&) {}
  virtual void sync_gradients(std::vector<Tensor*>& /*grads*/) {}
  virtual void teardown(std::vector<TunedLinear>&) {}
};

struct BlockTuneResult {
  double loss_first = 0, loss_best = 0, loss_last = 0;
  int best_iter = -1;
  TunePhases phases;
  std::vector<TunedLinear> layers;  // final V/alpha/beta/scale/zero per Linear (for packing)
};

// x_in, y_fp: [n, T, C] fp32; loss_mask: [n * T] (1 = token counts in the loss).
// quantize_layer(short name) selects the Linears to quantize (default: all seven); the others keep
// their FP weights and take part in the block forward unchanged.
// aux.B/aux.T describe one sample (B is overwritten per micro-batch); positions/rope cover T.
BlockTuneResult signround_tune_block(Context& ctx, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt,
                                     const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp,
                                     const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                     TuneHooks* hooks = nullptr,
                                     const std::function<bool(const std::string&)>& quantize_layer = {});

// The Linears of a block that AutoRound quantizes, with their HF short names.
std::vector<std::pair<std::string, Tensor*>> block_linears(BlockWeights& w);

}  // namespace ar::quant
