#include "quant/signround.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "parallel/exchange.h"

namespace ar::quant {

std::vector<std::pair<std::string, Tensor*>> block_linears(BlockWeights& w) {
  return {{"self_attn.q_proj", &w.wq}, {"self_attn.k_proj", &w.wk}, {"self_attn.v_proj", &w.wv},
          {"self_attn.o_proj", &w.wo}, {"mlp.gate_proj", &w.wg},   {"mlp.up_proj", &w.wu},
          {"mlp.down_proj", &w.wd}};
}

void TuneLane::run(const std::function<void(int)>& fn) const {
  if (!group) return fn(0);
  std::vector<int> m(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) m[size_t(r)] = member(r);
  group->run_on(m, fn);
}

BlockWeights clone_block(const BlockWeights& w, Context& ctx) {
  BlockWeights m;
  Tensor BlockWeights::*all[] = {&BlockWeights::ln1, &BlockWeights::wq, &BlockWeights::wk, &BlockWeights::wv,
                                 &BlockWeights::bq,  &BlockWeights::bk, &BlockWeights::bv, &BlockWeights::q_norm,
                                 &BlockWeights::k_norm, &BlockWeights::wo, &BlockWeights::bo, &BlockWeights::ln2,
                                 &BlockWeights::wg, &BlockWeights::wu, &BlockWeights::wd};
  for (auto f : all)
    if ((w.*f).defined()) m.*f = (w.*f).clone(ctx);
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

double signround_lr(const SignRoundOptions& opt, const QuantFormat& fmt) {
  return opt.lr > 0 ? opt.lr : (opt.iters >= 1000 && fmt.bits <= 3 ? 2.0 : 1.0) / std::max(1, opt.iters);
}

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where each tuned layer's gradients sit in the flat tunable-gradient buffer: [V | alpha | beta] per layer.
struct GradLayout {
  std::vector<int64_t> v, a, b;
  int64_t size = 0;
};

// One replica of the block under tuning: rank 0 tunes the home block, ranks > 0 a mirror.
struct Replica {
  Context* ctx = nullptr;
  BlockWeights mirror;
  BlockPtrs<const float*> wp;
  BlockPtrs<float*> gp;
  std::vector<TunedLinear> layers;
  std::vector<Tensor> What, dWhat, levels;  // levels: flat gradient buffers, one per tree depth
  std::vector<int8_t> signs;
  std::unique_ptr<cpu::CpuOps> ops;
  std::unique_ptr<BlockRunner<cpu::CpuOps>> runner;
  double loss = 0, qdq = 0, forward = 0, backward = 0;
};

uint64_t checksum(const Replica& r) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& L : r.layers)
    for (const Tensor* t : {&L.V, &L.alpha, &L.beta}) {
      const auto* p = static_cast<const unsigned char*>(t->raw());
      for (size_t i = 0; i < t->nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    }
  return h;
}

int tree_depth(int64_t leaves) {
  int d = 1;
  while ((int64_t(1) << (d - 1)) < leaves) ++d;
  return d;
}
}  // namespace

BlockTuneResult signround_tune_block(Context& ctx, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt,
                                     const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp,
                                     const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                     const TuneLane& lane, const std::function<bool(const std::string&)>& quantize_layer) {
  const int64_t n = x_in.dim(0), T = aux.T, C = dims.C;
  if (x_in.numel() != n * T * C || y_fp.numel() != x_in.numel() || int64_t(loss_mask.size()) != n * T)
    fail(ErrorKind::Internal, "signround_tune_block: inconsistent input shapes");
  if (n == 0) fail(ErrorKind::InvalidInput, "no calibration samples");
  const int64_t bs = std::min<int64_t>(opt.batch_size, n);
  const int64_t B = std::min<int64_t>(n, bs * std::max(1, opt.gradient_accumulate_steps));
  const int W = lane.group ? lane.world : 1;
  AR_CHECK(W >= 1 && W <= B && (!lane.group || W <= lane.group->size()), "tuning world out of range");
  AR_CHECK(!opt.deterministic || B % W == 0, "deterministic tuning needs a world dividing the batch");
  const double lr = signround_lr(opt, fmt);
  const double minmax_lr = opt.minmax_lr > 0 ? opt.minmax_lr : lr;
  const bool mm = opt.enable_minmax_tuning;
  // Rank r holds batch positions [pos(r), pos(r+1)); its leaves are single samples or micro-batches.
  auto pos = [&](int r) { return B * r / W; };
  const int64_t leaf = opt.deterministic ? 1 : bs;
  auto leaves_of = [&](int r) { return (pos(r + 1) - pos(r) + leaf - 1) / leaf; };
  int64_t max_leaves = 1;
  for (int r = 0; r < W; ++r) max_leaves = std::max(max_leaves, leaves_of(r));
  const int depth = tree_depth(max_leaves);

  BlockTuneResult res;
  auto& ph = res.phases;
  std::vector<size_t> lin;  // index into block_linears of each tuned layer
  {
    size_t li = 0;
    for (auto& [name, t] : block_linears(w)) {
      const size_t slot = li++;
      if (quantize_layer && !quantize_layer(name)) continue;
      lin.push_back(slot);
      res.layers.push_back(make_tuned_linear(ctx, name, t, fmt));
    }
  }
  const size_t nl = lin.size();
  GradLayout g;
  for (const auto& L : res.layers) {
    g.v.push_back(g.size);
    g.size += L.V.numel();
    g.a.push_back(g.size);
    g.size += L.alpha.numel();
    g.b.push_back(g.size);
    g.size += L.beta.numel();
  }

  // Replicas: rank 0 works on the home block; ranks > 0 build mirrors on their own device (first touch).
  auto t_mirrors = Clock::now();
  std::vector<Replica> reps(static_cast<size_t>(W));
  auto dispatch = [&](const std::function<void(int)>& fn) { lane.run(fn); };
  dispatch([&](int r) {
    Replica& R = reps[size_t(r)];
    R.ctx = lane.group ? &lane.ctx(r) : &ctx;
    Context& c = *R.ctx;
    BlockWeights* bw = &w;
    if (r == 0) {
      R.layers = res.layers;  // shares the home tensors (same objects' storage)
    } else {
      R.mirror = clone_block(w, c);
      bw = &R.mirror;
      auto mine = block_linears(R.mirror);
      for (size_t l = 0; l < nl; ++l) {
        const TunedLinear& H = res.layers[l];
        TunedLinear L;
        L.name = H.name;
        L.shape = H.shape;
        L.weight = mine[lin[l]].second;
        for (auto [dst, src] : {std::pair{&L.V, &H.V}, {&L.alpha, &H.alpha}, {&L.beta, &H.beta},
                                {&L.wmin0, &H.wmin0}, {&L.wmax0, &H.wmax0}, {&L.scale, &H.scale}, {&L.zero, &H.zero}})
          *dst = src->clone(c);
        R.layers.push_back(std::move(L));
      }
    }
    R.wp = bw->ptrs();
    const float** wslots[] = {&R.wp.wq, &R.wp.wk, &R.wp.wv, &R.wp.wo, &R.wp.wg, &R.wp.wu, &R.wp.wd};
    float** gslots[] = {&R.gp.wq, &R.gp.wk, &R.gp.wv, &R.gp.wo, &R.gp.wg, &R.gp.wu, &R.gp.wd};
    for (size_t l = 0; l < nl; ++l) {
      R.What.push_back(Tensor::empty(R.layers[l].weight->shape(), DType::F32, c));
      R.dWhat.push_back(Tensor::empty(R.layers[l].weight->shape(), DType::F32, c));
      *wslots[lin[l]] = R.What[l].f32();  // the block runs on the QDQ weights
      *gslots[lin[l]] = R.dWhat[l].f32();  // FP layers get no gradient
    }
    for (int d = 0; d < depth; ++d) R.levels.push_back(Tensor::zeros({std::max<int64_t>(g.size, 1)}, DType::F32, c));
    R.signs.assign(size_t(g.size), 0);
    R.ops = std::make_unique<cpu::CpuOps>(cpu::CpuOps{c});
    R.runner = std::make_unique<BlockRunner<cpu::CpuOps>>(*R.ops, dims);
  });
  // Best-iterate snapshot: replicas are identical, so rank 0 keeps it.
  std::vector<Tensor> bestV(nl), besta(nl), bestb(nl);
  for (size_t l = 0; l < nl; ++l) {
    bestV[l] = res.layers[l].V.clone(ctx);
    besta[l] = res.layers[l].alpha.clone(ctx);
    bestb[l] = res.layers[l].beta.clone(ctx);
  }
  parallel::GradExchange xchg(W, g.size, parallel::GradExchange::Mode::Sign);
  for (int r = 0; r < W; ++r) xchg.attach(r, reps[size_t(r)].levels[0].f32(), reps[size_t(r)].signs.data());
  ph.mirrors = since(t_mirrors);

  auto qdq_all = [&](Replica& R) {
    for (size_t l = 0; l < nl; ++l) {
      auto& L = R.layers[l];
      qdq_fwd(*R.ctx, L.shape, L.weight->f32(), L.V.f32(), L.alpha.f32(), L.beta.f32(), L.wmin0.f32(), L.wmax0.f32(),
              R.What[l].f32(), L.scale.f32(), L.zero.f32());
    }
  };
  std::vector<int64_t> idx;
  double denom = 1;
  // One leaf: batch positions [p0, p1) through forward + loss + backward, then the tunables' gradient
  // into `out`. Returns the leaf's loss share.
  auto run_leaf = [&](Replica& R, int64_t p0, int64_t p1, float* out) {
    Context& c = *R.ctx;
    const int64_t Bm = p1 - p0;
    for (auto& t : R.dWhat) std::fill(t.f32(), t.f32() + t.numel(), 0.f);
    Tensor x = Tensor::empty({Bm * T, C}, DType::F32, c), y = Tensor::empty({Bm * T, C}, DType::F32, c),
           dy = Tensor::empty({Bm * T, C}, DType::F32, c);
    for (int64_t b = 0; b < Bm; ++b) {
      const int64_t s = idx[size_t(p0 + b)];
      std::copy(x_in.f32() + s * T * C, x_in.f32() + (s + 1) * T * C, x.f32() + b * T * C);
    }
    BlockAux<float> a = aux;
    a.B = Bm;
    BlockRunner<cpu::CpuOps>::Cache cache;
    auto tf = Clock::now();
    R.runner->forward(R.wp, a, x.f32(), y.f32(), cache);
    double loss = 0;
    for (int64_t b = 0; b < Bm; ++b) {
      const int64_t s = idx[size_t(p0 + b)];
      for (int64_t t = 0; t < T; ++t) {
        const bool on = loss_mask[size_t(s * T + t)] != 0;
        const float* yr = y.f32() + (b * T + t) * C;
        const float* fr = y_fp.f32() + (s * T + t) * C;
        float* dr = dy.f32() + (b * T + t) * C;
        for (int64_t k = 0; k < C; ++k) {
          const double d = on ? double(yr[k]) - double(fr[k]) : 0.0;
          loss += d * d;
          dr[k] = float(2.0 * d / denom);
        }
      }
    }
    R.forward += since(tf);
    auto tb = Clock::now();
    R.runner->backward(R.wp, a, cache, dy.f32(), nullptr, R.gp);  // the block input needs no gradient
    for (size_t l = 0; l < nl; ++l) {
      auto& L = R.layers[l];
      qdq_bwd(c, L.shape, L.weight->f32(), L.V.f32(), L.alpha.f32(), L.beta.f32(), L.wmin0.f32(), L.wmax0.f32(),
              R.dWhat[l].f32(), out + g.v[l], mm ? out + g.a[l] : nullptr, mm ? out + g.b[l] : nullptr);
    }
    R.backward += since(tb);
    return loss / denom;
  };
  // The fixed tree over leaves [a, b) of rank r, result in levels[d].
  std::function<double(Replica&, int, int64_t, int64_t, int)> tree = [&](Replica& R, int r, int64_t a, int64_t b,
                                                                           int d) {
    const int64_t p0 = pos(r);
    if (b - a == 1) return run_leaf(R, p0 + a * leaf, std::min(pos(r + 1), p0 + (a + 1) * leaf), R.levels[size_t(d)].f32());
    const int64_t mid = (a + b) / 2;
    const double left = tree(R, r, a, mid, d);
    const double right = tree(R, r, mid, b, d + 1);
    float* x = R.levels[size_t(d)].f32();
    const float* y = R.levels[size_t(d) + 1].f32();
    R.ctx->pool().parallel_for(g.size, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
    }, 1 << 14);
    return left + right;
  };
  std::function<double(int, int)> loss_tree = [&](int a, int b) {
    if (b - a == 1) return reps[size_t(a)].loss;
    return loss_tree(a, (a + b) / 2) + loss_tree((a + b) / 2, b);
  };

  StratifiedSampler sampler(n, B, opt.seed);
  double best = INFINITY;
  std::vector<uint64_t> sums(static_cast<size_t>(W));
  for (int it = 0; it < opt.iters; ++it) {
    const auto t_it = Clock::now();
    idx = sampler.batch(it);
    int64_t valid = 0;
    for (int64_t s : idx)
      for (int64_t t = 0; t < T; ++t) valid += loss_mask[size_t(s * T + t)] != 0;
    denom = double(std::max<int64_t>(valid, 1)) * double(C);
    dispatch([&](int r) {
      Replica& R = reps[size_t(r)];
      auto tq = Clock::now();
      qdq_all(R);
      R.qdq += since(tq);
      R.loss = tree(R, r, 0, leaves_of(r), 0);
      if (!std::isfinite(R.loss))
        fail(ErrorKind::InvalidInput, "non-finite loss at iteration " + std::to_string(it));
    });
    const double loss = loss_tree(0, W);
    if (it == 0) res.loss_first = loss;
    res.loss_last = loss;
    if (loss < best) {
      best = loss;
      res.best_iter = it;
      for (size_t l = 0; l < nl; ++l) {
        std::copy(res.layers[l].V.f32(), res.layers[l].V.f32() + res.layers[l].V.numel(), bestV[l].f32());
        std::copy(res.layers[l].alpha.f32(), res.layers[l].alpha.f32() + res.layers[l].alpha.numel(), besta[l].f32());
        std::copy(res.layers[l].beta.f32(), res.layers[l].beta.f32() + res.layers[l].beta.numel(), bestb[l].f32());
      }
    }
    auto tx = Clock::now();
    dispatch([&](int r) { xchg.reduce_scatter(r, &reps[size_t(r)].ctx->pool()); });
    dispatch([&](int r) { xchg.all_gather(r); });
    ph.exchange += since(tx);
    ph.exchange_bytes += xchg.bytes_per_rank();
    auto ts = Clock::now();
    const float lr_i = float(lr * (1.0 - double(it) / opt.iters)), mm_i = float(minmax_lr * (1.0 - double(it) / opt.iters));
    dispatch([&](int r) {
      Replica& R = reps[size_t(r)];
      auto step = [&](Tensor& p, int64_t off, float rate) {
        float* x = p.f32();
        const int8_t* s = R.signs.data() + off;
        R.ctx->pool().parallel_for(p.numel(), [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) x[i] -= rate * float(s[i]);
        }, 1 << 14);
      };
      for (size_t l = 0; l < nl; ++l) {
        step(R.layers[l].V, g.v[l], lr_i);
        if (mm) {
          step(R.layers[l].alpha, g.a[l], mm_i);
          step(R.layers[l].beta, g.b[l], mm_i);
        }
      }
    });
    ph.step += since(ts);
    if (it == 0) ph.warmup = since(t_it);
    if (opt.on_step) {
      for (int r = 0; r < W; ++r) sums[size_t(r)] = checksum(reps[size_t(r)]);
      opt.on_step(it, sums);
    }
    if (opt.progress) opt.progress(it + 1, opt.iters, loss, best);
  }
  ph.qdq = reps[0].qdq;
  ph.forward = reps[0].forward;
  ph.backward = reps[0].backward;
  auto t_down = Clock::now();
  if (lane.parallel()) lane.run([&](int r) {
      if (r > 0) reps[size_t(r)] = Replica{};  // mirrors are freed on their own device's thread
    });
  res.loss_best = opt.iters > 0 ? best : 0;
  if (opt.use_best_mse && opt.iters > 0)
    for (size_t l = 0; l < nl; ++l) {
      std::copy(bestV[l].f32(), bestV[l].f32() + bestV[l].numel(), res.layers[l].V.f32());
      std::copy(besta[l].f32(), besta[l].f32() + besta[l].numel(), res.layers[l].alpha.f32());
      std::copy(bestb[l].f32(), bestb[l].f32() + bestb[l].numel(), res.layers[l].beta.f32());
    }
  Replica& home = reps[0];
  home.ctx = &ctx;
  qdq_all(home);
  for (size_t l = 0; l < nl; ++l) *res.layers[l].weight = home.What[l];
  ph.teardown = since(t_down);
  return res;
}

}  // namespace ar::quant
