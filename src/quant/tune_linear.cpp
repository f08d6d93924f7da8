#include "quant/tune_linear.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/small_float.h"
#include "kernels/cpu/ops.h"
#include "quant/linear_family.h"

namespace ar::quant {

BlockTuneResult signround_tune_linear(Context& ctx, const std::string& name, Tensor& w, const QuantFormat& fmt,
                                      const Tensor& x_in, const Tensor& x_fp, int64_t T,
                                      const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                      float act_max) {
  const int64_t n = x_in.dim(0), in = w.dim(1), out = w.dim(0);
  if (x_in.numel() != n * T * in || x_fp.numel() != x_in.numel() || int64_t(loss_mask.size()) != n * T)
    fail(ErrorKind::Internal, "signround_tune_linear: inconsistent input shapes");
  if (n == 0) fail(ErrorKind::InvalidInput, "no calibration samples");
  const int64_t bs = std::min<int64_t>(opt.batch_size, n);
  const int64_t B = std::min<int64_t>(n, bs * std::max(1, opt.gradient_accumulate_steps));
  const double lr = signround_lr(opt, fmt), minmax_lr = opt.minmax_lr > 0 ? opt.minmax_lr : lr;
  const bool mm = opt.enable_minmax_tuning;
  BlockTuneResult res;
  res.layers.push_back(make_tuned_linear(ctx, name, &w, fmt));
  TunedLinear& L = res.layers[0];
  Tensor What = Tensor::empty(w.shape(), DType::F32, ctx), dWhat = Tensor::empty(w.shape(), DType::F32, ctx);
  Tunables best_t = snapshot(ctx, L);
  const bool act = fmt.act_static();  // the input through its E4M3 QDQ at s(act_max * act_coef)
  L.act_max = act_max;
  auto act_scale = [&] { return fp8_static_input_scale(L.act_max * L.act_coef); };
  auto qdq = [&] { family(L).qdq(ctx, L, What.f32(), nullptr); };
  const int64_t chunk = std::clamp<int64_t>((int64_t(16) << 20) / std::max<int64_t>(out, 1), 16, bs * T);
  Tensor xi = Tensor::empty({chunk, in}, DType::F32, ctx), xf = Tensor::empty({chunk, in}, DType::F32, ctx);
  Tensor y = Tensor::empty({chunk, out}, DType::F32, ctx), yf = Tensor::empty({chunk, out}, DType::F32, ctx);
  Tensor xq = act ? Tensor::empty({chunk, in}, DType::F32, ctx) : Tensor(),
         dxq = act ? Tensor::empty({chunk, in}, DType::F32, ctx) : Tensor();
  StratifiedSampler sampler(n, B, opt.seed);
  double best = INFINITY;
  using Clock = std::chrono::steady_clock;
  for (int it = 0; it < opt.iters; ++it) {
    auto tf = Clock::now();
    qdq();
    std::fill(dWhat.f32(), dWhat.f32() + dWhat.numel(), 0.f);
    // The batch's valid rows, in sample order.
    std::vector<int64_t> rows;
    for (int64_t s : sampler.batch(it))
      for (int64_t t = 0; t < T; ++t)
        if (loss_mask[size_t(s * T + t)]) rows.push_back(s * T + t);
    const double denom = double(std::max<size_t>(rows.size(), 1)) * double(out);
    double loss = 0, ds = 0;
    const float s = act ? act_scale() : 0.f;
    for (size_t r0 = 0; r0 < rows.size(); r0 += size_t(chunk)) {
      const int64_t m = std::min<int64_t>(chunk, int64_t(rows.size() - r0));
      for (int64_t r = 0; r < m; ++r) {
        std::copy_n(x_in.f32() + rows[r0 + size_t(r)] * in, in, xi.f32() + r * in);
        std::copy_n(x_fp.f32() + rows[r0 + size_t(r)] * in, in, xf.f32() + r * in);
      }
      if (act) cpu::act_qdq_fwd(ctx, xi.f32(), s, xq.f32(), m * in);
      const float* x_read = act ? xq.f32() : xi.f32();
      cpu::gemm(ctx, false, true, m, out, in, 1.f, x_read, in, What.f32(), in, 0.f, y.f32(), out);
      cpu::gemm(ctx, false, true, m, out, in, 1.f, xf.f32(), in, w.f32(), in, 0.f, yf.f32(), out);
      float* d = y.f32();
      const float* f = yf.f32();
      for (int64_t k = 0; k < m * out; ++k) {
        const double e = double(d[k]) - double(f[k]);
        loss += e * e;
        d[k] = float(2.0 * e / denom);
      }
      cpu::gemm(ctx, true, false, out, in, m, 1.f, y.f32(), out, x_read, in, 1.f, dWhat.f32(), in);
      if (act && mm) {  // dL/ds through the input's QDQ (chunks in row order)
        cpu::gemm(ctx, false, false, m, in, out, 1.f, y.f32(), out, What.f32(), in, 0.f, dxq.f32(), in);
        ds += cpu::act_qdq_bwd(ctx, xi.f32(), s, dxq.f32(), nullptr, false, m, in);
      }
    }
    loss /= denom;
    res.phases.forward += std::chrono::duration<double>(Clock::now() - tf).count();
    if (!std::isfinite(loss)) fail(ErrorKind::InvalidInput, name + ": non-finite loss at iteration " + std::to_string(it));
    if (it == 0) res.loss_first = loss;
    res.loss_last = loss;
    if (loss < best) {
      best = loss;
      res.best_iter = it;
      best_t = snapshot(ctx, L);
    }
    auto ts = Clock::now();
    const float lr_i = float(lr * (1.0 - double(it) / opt.iters)), mm_i = float(minmax_lr * (1.0 - double(it) / opt.iters));
    if (!step_linear(ctx, L, dWhat.f32(), {lr_i, mm_i, mm}, nullptr))
      fail(ErrorKind::InvalidInput, name + ": non-finite gradient of the tunables at iteration " + std::to_string(it));
    // The activation coefficient as the blocks step it (signround.cpp step_act).
    if (act && mm && L.act_max * L.act_coef / kE4M3Max > fp8_static_input_scale(0.f))
      L.act_coef = std::clamp(L.act_coef - mm_i * float((ds > 0) - (ds < 0)), 0.f, 1.f);
    res.phases.step += std::chrono::duration<double>(Clock::now() - ts).count();
    if (opt.progress) opt.progress(it + 1, opt.iters, loss, best);
  }
  res.loss_best = opt.iters > 0 ? best : 0;
  if (opt.use_best_mse && opt.iters > 0) restore(L, best_t);
  if (act) L.input_scale = act_scale();
  qdq();
  w = What;
  return res;
}

}  // namespace ar::quant
