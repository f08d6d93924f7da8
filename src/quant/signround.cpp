#include "quant/signround.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace ar::quant {

std::vector<std::pair<std::string, Tensor*>> block_linears(BlockWeights& w) {
  return {{"self_attn.q_proj", &w.wq}, {"self_attn.k_proj", &w.wk}, {"self_attn.v_proj", &w.wv},
          {"self_attn.o_proj", &w.wo}, {"mlp.gate_proj", &w.wg},   {"mlp.up_proj", &w.wu},
          {"mlp.down_proj", &w.wd}};
}

namespace {
// Seeded reshuffling cyclic sampler: a permutation is consumed in consecutive chunks of `batch`;
// when fewer than `batch` indices remain, a fresh permutation starts.
class CyclicSampler {
 public:
  CyclicSampler(int64_t n, int64_t batch, uint64_t seed) : n_(n), batch_(batch), rng_(seed), perm_(size_t(n)) {
    reshuffle();
  }
  std::vector<int64_t> next() {
    if (pos_ + batch_ > n_) reshuffle();
    std::vector<int64_t> r(perm_.begin() + pos_, perm_.begin() + pos_ + batch_);
    pos_ += batch_;
    return r;
  }

 private:
  void reshuffle() {
    std::iota(perm_.begin(), perm_.end(), 0);
    for (int64_t i = n_ - 1; i > 0; --i) std::swap(perm_[size_t(i)], perm_[size_t(rng_() % uint64_t(i + 1))]);
    pos_ = 0;
  }
  int64_t n_, batch_, pos_ = 0;
  std::mt19937_64 rng_;
  std::vector<int64_t> perm_;
};

Tensor filled(Context& ctx, int64_t n, float v) {
  Tensor t = Tensor::empty({n}, DType::F32, ctx);
  std::fill(t.f32(), t.f32() + n, v);
  return t;
}

void sign_step(Context& ctx, Tensor& p, const Tensor& g, float lr) {
  float* x = p.f32();
  const float* d = g.f32();
  ctx.pool().parallel_for(p.numel(), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] -= lr * float((d[i] > 0.f) - (d[i] < 0.f));
  }, 4096);
}
}  // namespace

BlockTuneResult signround_tune_block(Context& ctx, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt,
                                     const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp,
                                     const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                     TuneHooks* hooks, const std::function<bool(const std::string&)>& quantize_layer) {
  const int64_t n = x_in.dim(0), T = aux.T, C = dims.C;
  if (x_in.numel() != n * T * C || y_fp.numel() != x_in.numel() || int64_t(loss_mask.size()) != n * T)
    fail(ErrorKind::Internal, "signround_tune_block: inconsistent input shapes");
  if (n == 0) fail(ErrorKind::InvalidInput, "no calibration samples");
  const int64_t bs = std::min<int64_t>(opt.batch_size, n);
  const int64_t global = std::min<int64_t>(n, bs * std::max(1, opt.gradient_accumulate_steps));
  const double lr = opt.lr > 0 ? opt.lr : (opt.iters >= 1000 && fmt.bits <= 3 ? 2.0 : 1.0) / std::max(1, opt.iters);
  const double minmax_lr = opt.minmax_lr > 0 ? opt.minmax_lr : lr;

  BlockTuneResult res;
  BlockPtrs<const float*> wp = w.ptrs();
  const float** all_slots[] = {&wp.wq, &wp.wk, &wp.wv, &wp.wo, &wp.wg, &wp.wu, &wp.wd};
  std::vector<const float**> slots;
  BlockPtrs<float*> gp;
  float** all_gslots[] = {&gp.wq, &gp.wk, &gp.wv, &gp.wo, &gp.wg, &gp.wu, &gp.wd};
  std::vector<float**> gslots;
  size_t li = 0;
  for (auto& [name, t] : block_linears(w)) {
    const size_t slot = li++;
    if (quantize_layer && !quantize_layer(name)) continue;
    slots.push_back(all_slots[slot]);
    gslots.push_back(all_gslots[slot]);
    TunedLinear L;
    L.name = name;
    L.weight = t;
    L.shape = make_qdq_shape(t->dim(0), t->dim(1), fmt.bits, fmt.group_size, fmt.sym);
    const int64_t ng = L.shape.out * L.shape.groups();
    L.V = Tensor::zeros({L.shape.out, L.shape.groups() * L.shape.group}, DType::F32, ctx);
    L.alpha = filled(ctx, ng, 1.f);
    L.beta = filled(ctx, ng, 1.f);
    L.wmin0 = Tensor::empty({ng}, DType::F32, ctx);
    L.wmax0 = Tensor::empty({ng}, DType::F32, ctx);
    L.scale = Tensor::empty({ng}, DType::F32, ctx);
    L.zero = Tensor::empty({ng}, DType::F32, ctx);
    qdq_minmax(ctx, L.shape, t->f32(), L.wmin0.f32(), L.wmax0.f32());
    res.layers.push_back(std::move(L));
  }
  auto& layers = res.layers;
  if (hooks) hooks->setup(layers);
  const size_t nl = layers.size();
  std::vector<Tensor> What(nl), dWhat(nl), dV(nl), da(nl), db(nl), bestV(nl), besta(nl), bestb(nl);
  for (size_t l = 0; l < nl; ++l) {
    What[l] = Tensor::empty(layers[l].weight->shape(), DType::F32, ctx);
    dWhat[l] = Tensor::empty(layers[l].weight->shape(), DType::F32, ctx);
    dV[l] = Tensor::empty(layers[l].V.shape(), DType::F32, ctx);
    da[l] = Tensor::empty(layers[l].alpha.shape(), DType::F32, ctx);
    db[l] = Tensor::empty(layers[l].beta.shape(), DType::F32, ctx);
    bestV[l] = layers[l].V.clone(ctx);
    besta[l] = layers[l].alpha.clone(ctx);
    bestb[l] = layers[l].beta.clone(ctx);
  }
  auto qdq_all = [&] {
    for (size_t l = 0; l < nl; ++l) {
      auto& L = layers[l];
      qdq_fwd(ctx, L.shape, L.weight->f32(), L.V.f32(), L.alpha.f32(), L.beta.f32(), L.wmin0.f32(), L.wmax0.f32(),
              What[l].f32(), L.scale.f32(), L.zero.f32());
    }
  };
  // Block pointers using the QDQ weights; gradients land in dWhat (FP layers get no gradient).
  for (size_t l = 0; l < nl; ++l) *slots[l] = What[l].f32();
  for (size_t l = 0; l < nl; ++l) *gslots[l] = dWhat[l].f32();

  cpu::CpuOps ops{ctx};
  BlockRunner<cpu::CpuOps> runner(ops, dims);
  CyclicSampler sampler(n, global, opt.seed);
  double best = INFINITY;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (int it = 0; it < opt.iters; ++it) {
    auto t0 = Clock::now();
    qdq_all();
    res.phases.qdq += since(t0);
    for (auto& t : dWhat) std::fill(t.f32(), t.f32() + t.numel(), 0.f);
    std::vector<int64_t> idx = sampler.next();
    int64_t valid = 0;
    for (int64_t s : idx)
      for (int64_t t = 0; t < T; ++t) valid += loss_mask[size_t(s * T + t)] != 0;
    const double denom = double(std::max<int64_t>(valid, 1)) * double(C);
    double loss = 0;
    for (size_t m0 = 0; m0 < idx.size(); m0 += size_t(bs)) {
      const int64_t B = std::min<int64_t>(bs, int64_t(idx.size() - m0));
      Tensor x = Tensor::empty({B * T, C}, DType::F32, ctx), y = Tensor::empty({B * T, C}, DType::F32, ctx),
             dy = Tensor::empty({B * T, C}, DType::F32, ctx), dx = Tensor::empty({B * T, C}, DType::F32, ctx);
      for (int64_t b = 0; b < B; ++b)
        std::copy(x_in.f32() + idx[m0 + size_t(b)] * T * C, x_in.f32() + (idx[m0 + size_t(b)] + 1) * T * C,
                  x.f32() + b * T * C);
      BlockAux<float> a = aux;
      a.B = B;
      BlockRunner<cpu::CpuOps>::Cache cache;
      auto tf = Clock::now();
      runner.forward(wp, a, x.f32(), y.f32(), cache);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t s = idx[m0 + size_t(b)];
        for (int64_t t = 0; t < T; ++t) {
          const bool on = loss_mask[size_t(s * T + t)] != 0;
          const float* yr = y.f32() + (b * T + t) * C;
          const float* fr = y_fp.f32() + (s * T + t) * C;
          float* dr = dy.f32() + (b * T + t) * C;
          for (int64_t c = 0; c < C; ++c) {
            const double d = on ? double(yr[c]) - double(fr[c]) : 0.0;
            loss += d * d;
            dr[c] = float(2.0 * d / denom);
          }
        }
      }
      res.phases.forward += since(tf);
      auto tb = Clock::now();
      runner.backward(wp, a, cache, dy.f32(), dx.f32(), gp);
      res.phases.backward += since(tb);
    }
    loss /= denom;
    if (it == 0) res.loss_first = loss;
    res.loss_last = loss;
    if (!std::isfinite(loss)) fail(ErrorKind::InvalidInput, "non-finite loss at iteration " + std::to_string(it));
    if (loss < best) {
      best = loss;
      res.best_iter = it;
      for (size_t l = 0; l < nl; ++l) {
        std::copy(layers[l].V.f32(), layers[l].V.f32() + layers[l].V.numel(), bestV[l].f32());
        std::copy(layers[l].alpha.f32(), layers[l].alpha.f32() + layers[l].alpha.numel(), besta[l].f32());
        std::copy(layers[l].beta.f32(), layers[l].beta.f32() + layers[l].beta.numel(), bestb[l].f32());
      }
    }
    std::vector<Tensor*> grads;
    for (auto& t : dWhat) grads.push_back(&t);
    if (hooks) hooks->sync_gradients(grads);
    auto ts = Clock::now();
    const float lr_i = float(lr * (1.0 - double(it) / opt.iters)), mm_i = float(minmax_lr * (1.0 - double(it) / opt.iters));
    for (size_t l = 0; l < nl; ++l) {
      auto& L = layers[l];
      const bool mm = opt.enable_minmax_tuning;
      qdq_bwd(ctx, L.shape, L.weight->f32(), L.V.f32(), L.alpha.f32(), L.beta.f32(), L.wmin0.f32(), L.wmax0.f32(),
              dWhat[l].f32(), dV[l].f32(), mm ? da[l].f32() : nullptr, mm ? db[l].f32() : nullptr);
      sign_step(ctx, L.V, dV[l], lr_i);
      if (mm) {
        sign_step(ctx, L.alpha, da[l], mm_i);
        sign_step(ctx, L.beta, db[l], mm_i);
      }
    }
    res.phases.step += since(ts);  // includes the QDQ backward
    if (opt.progress) opt.progress(it + 1, opt.iters);
  }
  res.loss_best = opt.iters > 0 ? best : 0;
  if (opt.use_best_mse && opt.iters > 0)
    for (size_t l = 0; l < nl; ++l) {
      layers[l].V = bestV[l];
      layers[l].alpha = besta[l];
      layers[l].beta = bestb[l];
    }
  qdq_all();
  for (size_t l = 0; l < nl; ++l) *layers[l].weight = What[l];
  if (hooks) hooks->teardown(layers);
  return res;
}

}  // namespace ar::quant
