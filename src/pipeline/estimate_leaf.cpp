#include "pipeline/estimate_leaf.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/malloc_policy.h"
#include "model/loader.h"
#include "pipeline/block_passes.h"

namespace ar {

namespace {

using Clock = std::chrono::steady_clock;

// The fastest steady iteration of 4 on the first n samples of x (cycled when x has fewer): not the first
// (it touches the tuning state), nor with the best-iterate rule the last (it measures the loss only).
// The fastest, since another process on the machine only ever slows one down (an outlier of +25% was
// seen in 1 of 8 runs). The target is the input itself: any target costs the same. w ends as the tuner
// leaves it (its QDQ values), which costs the next measurement nothing.
double time_iterations(Context& ctx, const BlockDims& d, BlockWeights& w, const quant::QuantFormat& fmt,
                       quant::SignRoundOptions o, const BlockAux<float>& aux, const Tensor& x, int64_t n,
                       const LeafTuner& tuner) {
  const int64_t T = x.dim(1), rows = x.dim(0);
  const size_t sample_bytes = x.nbytes() / size_t(rows);
  Tensor xn = Tensor::empty({n, T, x.dim(2)}, x.dtype(), ctx);
  for (int64_t s = 0; s < n; ++s)
    std::memcpy(static_cast<char*>(xn.raw()) + size_t(s) * sample_bytes,
                static_cast<const char*>(x.raw()) + size_t(s % rows) * sample_bytes, sample_bytes);
  const std::vector<uint8_t> mask(size_t(n * T), 1);
  o.iters = 4;
  o.batch_size = n;
  o.gradient_accumulate_steps = 1;
  o.on_step = {};
  if (fmt.act_static()) o.fix_params = [](Context&, quant::TunedLinear& L) { L.act_max = 1.f; };
  else o.fix_params = {};
  std::vector<double> walls;
  auto last = Clock::now();
  o.progress = [&](int, int, double, double) {
    const auto now = Clock::now();
    walls.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  };
  if (tuner) tuner(w, o, xn, mask);
  else quant::signround_tune_block(ctx, d, w, fmt, aux, xn, xn, mask, o);
  if (o.use_best_mse && walls.size() > 2) walls.pop_back();
  if (walls.size() < 2) return walls.empty() ? 0 : walls[0];
  return *std::min_element(walls.begin() + 1, walls.end());
}

}  // namespace

double sample_flops(const BlockDims& d, int64_t T) {
  const double C = double(d.C), q = double(d.H * d.D), kv = double(d.Hkv * d.D);
  const MoeDims& m = d.moe;
  const double ffn = !d.is_moe() ? 3 * C * double(d.I)
                                 : double(m.E) * C + double(m.K) * 3 * C * double(m.I) +
                                       (m.Is > 0 ? 3 * C * double(m.Is) + C : 0);
  const double linear = C * q + 2 * C * kv + q * C + ffn;
  return 3.0 * double(T) * (2 * linear + 4 * q * double(T) / 2);  // forward + backward (= 2 forwards)
}

int64_t leaf_samples(int64_t run_batch) { return std::max<int64_t>(run_batch, 2); }

double leaf_flops(const BlockDims& d, int64_t T, int64_t samples) {
  return 4.0 * double(1 + samples) * sample_flops(d, T);
}

LeafTimes fit_leaf(double t1, double tn, int64_t n) {
  LeafTimes r;
  r.per_sample_s = std::max((tn - t1) / double(n - 1), 0.1 * tn / double(n));
  r.fixed_s = std::max(tn - double(n) * r.per_sample_s, 0.0);
  return r;
}

double measure_pass(Context& ctx, const BlockDims& d, const BlockWeights& block, const BlockAux<float>& aux,
                    const Tensor& x, bool amp, bool imatrix) {
  const int64_t n = std::min<int64_t>(x.dim(0), 8);
  Tensor y = Tensor::empty({n, x.dim(1), x.dim(2)}, x.dtype(), ctx);
  Imatrix im;
  auto sweep = [&](int64_t samples) {
    const auto ts = Clock::now();
    block_forward_all(ctx, quant::TuneLane{}, d, block, aux, x, y, samples, 1, amp, {imatrix ? &im : nullptr});
    return std::chrono::duration<double>(Clock::now() - ts).count();
  };
  sweep(1);  // cold: the first sweep pays the allocator's and the GEMM library's first use (x1.6 here)
  const double per_sample = sweep(n) / double(n);
  y = Tensor();
  ctx.allocator().trim();
  return per_sample;
}

LeafTimes measure_leaf(Context& ctx, const BlockDims& d, BlockWeights block, const quant::QuantFormat& fmt,
                       const quant::SignRoundOptions& tune, const BlockAux<float>& aux, const Tensor& x,
                       int64_t samples, const LeafTuner& tuner) {
  const auto t0 = Clock::now();
  const double tn = time_iterations(ctx, d, block, fmt, tune, aux, x, samples, tuner);
  const double t1 = time_iterations(ctx, d, block, fmt, tune, aux, x, 1, tuner);
  block = {};
  ctx.allocator().trim();  // the leaf's buffer sizes are not the run's: kept cached, they add to its peak
  return_free_heap_pages();  // and its small ones, freed, would stay resident in the heap
  LeafTimes r = fit_leaf(t1, tn, samples);
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace ar
