#include "quant/cuda/signround_cuda.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/qdq_fp.h"
#include "kernels/cuda/qdq_int.h"
#include "kernels/cuda/sign_step.h"
#include "quant/cuda/device_block.h"

namespace ar::quant {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One tuned Linear's device state: W, its QDQ What, the tunables, their best snapshot and gradients. A float
// scheme (TunedLinear::fp) tunes V and beta; lo holds its tiles' init coefficients, hi their max|w|.
struct DeviceLinear {
  size_t slot = 0;
  cuda::DeviceArray<float> W, What, V, alpha, beta, lo, hi, scale, zero, dW, dV, da, db, bV, balpha, bbeta;
  cuda::DeviceArray<uint16_t> What16;  // --amp: the QDQ written in bf16, the GEMM operand
};

class DeviceTuner {
 public:
  DeviceTuner(cuda::DeviceContext& dev, Context& host, const BlockDims& dims, BlockWeights& w, const QuantFormat& fmt,
              const BlockAux<float>& aux, const Tensor& x_in, const Tensor& y_fp, const std::vector<uint8_t>& mask,
              const SignRoundOptions& opt, const LayerFormats* layers)
      : dev_(dev), host_(host), dims_(dims), fmt_(fmt), aux_(aux), mask_(mask), opt_(opt), n_(x_in.dim(0)) {
    refuse_unsupported(x_in, y_fp);
    upload_block(w, layers);
    upload_calibration(x_in, y_fp);
  }

  BlockTuneResult run() {
    StratifiedSampler sampler(n_, B_, opt_.seed);
    for (int it = 0; it < opt_.iters; ++it) iteration(it, sampler.batch(it));
    res_.loss_best = opt_.iters > 0 ? best_loss_ : 0;
    const bool restore = opt_.use_best_mse && opt_.iters > 0 && res_.best_iter != opt_.iters - 1;
    for (DeviceLinear& L : lin_) {  // the best (or last) tunables, their QDQ, back to the host
      if (restore) {
        copy(L.bV, L.V);
        copy(L.balpha, L.alpha);
        copy(L.bbeta, L.beta);
      }
      qdq(L, false);  // the weights' fp32 QDQ values (also under --amp: bf16 was only the operand)
    }
    for (size_t l = 0; l < lin_.size(); ++l) download(l);
    return std::move(res_);
  }

 private:
  void refuse_unsupported(const Tensor& x_in, const Tensor& y_fp) const {
    const auto no = [&](const std::string& what) {
      fail(ErrorKind::Unsupported, dev_.name() + ": " + what + " is not tuned on the CUDA backend yet");
    };
    if (fmt_.is_float() && fmt_.group_size == 0) no("a float weight scheme with one scale per tensor");
    if (fmt_.act_static()) no("FP8_STATIC");
    if (dims_.is_moe()) no("a mixture-of-experts block");
    if (aux_.key_mask) no("a key mask");
    if (opt_.fix_params) no("a scheme with fixed scales (GGUF)");
    if (n_ == 0) fail(ErrorKind::InvalidInput, "no calibration samples");
    if (x_in.numel() != n_ * aux_.T * dims_.C || y_fp.numel() != x_in.numel() ||
        int64_t(mask_.size()) != n_ * aux_.T)
      fail(ErrorKind::Internal, "signround_tune_block_cuda: inconsistent input shapes");
  }

  void copy(const cuda::DeviceArray<float>& src, cuda::DeviceArray<float>& dst) {
    cuda::check(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, dev_.stream()),
                dev_.index(), "device copy");
  }
  cuda::DeviceArray<float> upload(const Tensor& t) { return dev_.upload(t.f32(), t.numel()); }
  cuda::DeviceArray<float> zeros(int64_t n) {
    auto a = dev_.alloc<float>(n);
    cuda::check(cudaMemsetAsync(a.data(), 0, a.bytes(), dev_.stream()), dev_.index(), "memset");
    return a;
  }

  // Every block tensor on the device; each tuned Linear's slot reads its What.
  void upload_block(BlockWeights& w, const LayerFormats* layers) {
    DeviceBlock blk = upload_dense_block(dev_, w);
    wp_ = blk.ptrs;
    held_ = std::move(blk.held);
    size_t slot = 0;
    for (auto& [name, t] : block_linears(w)) {
      const size_t s = slot++;
      const auto it = layers ? layers->find(name) : LayerFormats::const_iterator{};
      if (layers && it == layers->end()) continue;
      res_.layers.push_back(make_tuned_linear(host_, name, t, layers ? it->second : fmt_));
      const TunedLinear& H = res_.layers.back();
      DeviceLinear L;
      L.slot = s;
      const int64_t nw = t->numel(), nv = H.V.numel(), ng = H.alpha.numel();
      L.W = dev_.upload(t->f32(), nw);
      L.What = dev_.alloc<float>(nw);
      if (opt_.amp) L.What16 = dev_.alloc<uint16_t>(nw);
      L.V = upload(H.V);
      L.alpha = upload(H.alpha);
      L.beta = upload(H.beta);
      L.lo = upload(H.wmin0);
      L.hi = upload(H.wmax0);
      L.scale = dev_.alloc<float>(ng);
      L.zero = dev_.alloc<float>(ng);
      L.dW = dev_.alloc<float>(nw);
      L.dV = zeros(nv);  // V's padding columns get no gradient: their zeros stay
      L.da = dev_.alloc<float>(ng);
      L.db = dev_.alloc<float>(ng);
      L.bV = dev_.alloc<float>(nv);
      L.balpha = dev_.alloc<float>(ng);
      L.bbeta = dev_.alloc<float>(ng);
      linear_slot(wp_, s) = L.What.data();
      linear_slot(gp_, s) = L.dW.data();
      lin_.push_back(std::move(L));
    }
    share_fused_global_scales(res_.layers);  // NVFP4: fused Linears share theirs, as on the CPU
    const int64_t B = opt_.batch_size * std::max(1, opt_.gradient_accumulate_steps);
    B_ = std::min<int64_t>(B, n_);
    bs_ = std::min<int64_t>(opt_.batch_size, B_);
  }

  void upload_calibration(const Tensor& x_in, const Tensor& y_fp) {
    const Tensor x32 = x_in.dtype() == DType::F32 ? x_in : x_in.to(DType::F32, host_);
    const Tensor y32 = y_fp.dtype() == DType::F32 ? y_fp : y_fp.to(DType::F32, host_);
    x_ = upload(x32);
    y_ = upload(y32);
    const int64_t T = aux_.T;
    rope_ = upload_rope(dev_, aux_, bs_, dims_.D);
    xb_ = dev_.alloc<float>(bs_ * T * dims_.C);
    yb_ = dev_.alloc<float>(bs_ * T * dims_.C);
    tb_ = dev_.alloc<float>(bs_ * T * dims_.C);
    on_ = dev_.alloc<uint8_t>(bs_ * T);
    row_loss_ = dev_.alloc<double>(bs_ * T);
  }

  // The QDQ of L's weight into What, or into What16 (bf16) for the tuning's GEMMs under --amp.
  void qdq(DeviceLinear& L, bool bf16) {
    const TunedLinear& H = res_.layers[size_t(&L - lin_.data())];
    if (H.fp) {
      cuda::fp_qdq_fwd(dev_, *H.fp, L.W.data(), L.V.data(), L.beta.data(), L.lo.data(), L.hi.data(),
                       bf16 ? nullptr : L.What.data(), bf16 ? L.What16.data() : nullptr, L.scale.data());
      return;
    }
    const QdqShape& sh = H.shape;
    cuda::qdq_fwd(dev_, sh, L.W.data(), L.V.data(), L.alpha.data(), L.beta.data(), L.lo.data(), L.hi.data(),
                  bf16 ? nullptr : L.What.data(), bf16 ? L.What16.data() : nullptr, L.scale.data(), L.zero.data());
  }

  // Micro-batch positions [p0, p1) of `idx`: forward, loss (returned, not yet divided), backward into dW^.
  double micro_batch(const std::vector<int64_t>& idx, int64_t p0, int64_t p1, bool grad, bool accumulate) {
    const int64_t Bm = p1 - p0, T = aux_.T, C = dims_.C, rows = Bm * T;
    std::vector<uint8_t> on(static_cast<size_t>(rows));
    for (int64_t b = 0; b < Bm; ++b) {
      const int64_t s = idx[size_t(p0 + b)];
      const size_t bytes = size_t(T * C) * sizeof(float);
      cuda::check(cudaMemcpyAsync(xb_.data() + b * T * C, x_.data() + s * T * C, bytes, cudaMemcpyDeviceToDevice,
                                  dev_.stream()),
                  dev_.index(), "gathering the batch");
      cuda::check(cudaMemcpyAsync(tb_.data() + b * T * C, y_.data() + s * T * C, bytes, cudaMemcpyDeviceToDevice,
                                  dev_.stream()),
                  dev_.index(), "gathering the batch");
      for (int64_t t = 0; t < T; ++t) on[size_t(b * T + t)] = mask_[size_t(s * T + t)];
    }
    dev_.upload(on_.data(), on.data(), on.size());
    cuda::CudaOps ops(dev_, opt_.amp);
    if (opt_.amp)
      for (DeviceLinear& L : lin_) ops.bind(L.What.data(), L.What16.data());  // slot pointer -> its bf16 QDQ
    BlockRunner<cuda::CudaOps> runner(ops, dims_);
    BlockRunner<cuda::CudaOps>::Cache cache;
    BlockAux<float> a{Bm, T, rope_.pos.data(), rope_.cos.data(), rope_.sin.data(), nullptr};
    auto tf = Clock::now();
    runner.forward(wp_, a, xb_.data(), yb_.data(), cache);
    cuda::mse_loss_rows(dev_, yb_.data(), tb_.data(), on_.data(), rows, C, denom_, row_loss_.data());
    std::vector<double> row_loss(static_cast<size_t>(rows));
    dev_.download(row_loss.data(), row_loss_.data(), row_loss.size() * sizeof(double));
    double loss = 0;
    for (double l : row_loss) loss += l;  // rows in order, as the CPU tuner adds them
    res_.phases.forward += since(tf);
    if (!grad) return loss;
    auto tb = Clock::now();
    runner.backward(wp_, a, cache, tb_.data(), nullptr, gp_, accumulate);
    dev_.synchronize();
    res_.phases.backward += since(tb);
    return loss;
  }

  void iteration(int it, const std::vector<int64_t>& idx) {
    const bool grad = !(opt_.use_best_mse && it == opt_.iters - 1);
    int64_t valid = 0;
    for (int64_t s : idx)
      for (int64_t t = 0; t < aux_.T; ++t) valid += mask_[size_t(s * aux_.T + t)] != 0;
    denom_ = double(std::max<int64_t>(valid, 1)) * double(dims_.C);
    auto tq = Clock::now();
    for (DeviceLinear& L : lin_) qdq(L, opt_.amp);
    res_.phases.qdq += since(tq);
    double loss = 0;
    for (int64_t p0 = 0; p0 < B_; p0 += bs_) loss += micro_batch(idx, p0, std::min(B_, p0 + bs_), grad, p0 > 0);
    loss /= denom_;
    if (!std::isfinite(loss)) fail(ErrorKind::InvalidInput, "non-finite loss at iteration " + std::to_string(it));
    const bool best = res_.record_loss(it, loss, best_loss_);
    if (grad) step(it, best);
    else if (best) snapshot();
    if (opt_.progress) opt_.progress(it + 1, opt_.iters, loss, best_loss_);
  }

  void snapshot() {
    for (DeviceLinear& L : lin_) {
      copy(L.V, L.bV);
      copy(L.alpha, L.balpha);
      copy(L.beta, L.bbeta);
    }
  }

  // dW^ -> dV, dalpha, dbeta by the QDQ backward; then p -= rate sign(dp), the best iterate saved first.
  void step(int it, bool save) {
    auto ts = Clock::now();
    const double decay = 1.0 - double(it) / opt_.iters;
    const double lr = signround_lr(opt_, fmt_), mm_lr = opt_.minmax_lr > 0 ? opt_.minmax_lr : lr;
    const bool mm = opt_.enable_minmax_tuning;
    if (!flag_.n) flag_ = dev_.alloc<int>(1);
    cuda::check(cudaMemsetAsync(flag_.data(), 0, sizeof(int), dev_.stream()), dev_.index(), "memset");
    for (size_t l = 0; l < lin_.size(); ++l) {
      DeviceLinear& L = lin_[l];
      const TunedLinear& H = res_.layers[l];
      if (H.fp)  // V and beta; alpha stays 1 (AutoRound's min_scale gets no gradient)
        cuda::fp_qdq_bwd(dev_, *H.fp, L.W.data(), L.V.data(), L.beta.data(), L.lo.data(), L.hi.data(), L.dW.data(),
                         L.dV.data(), mm ? L.db.data() : nullptr);
      else
        cuda::qdq_bwd(dev_, H.shape, L.W.data(), L.V.data(), L.alpha.data(), L.beta.data(), L.lo.data(),
                      L.hi.data(), L.dW.data(), L.dV.data(), mm ? L.da.data() : nullptr, mm ? L.db.data() : nullptr);
      cuda::sign_step(dev_, L.V.data(), L.dV.data(), L.V.n, float(lr * decay), false, save ? L.bV.data() : nullptr,
                      flag_.data());
      if (mm && H.fp) {
        cuda::sign_step(dev_, L.beta.data(), L.db.data(), L.beta.n, float(mm_lr * decay), true,
                        save ? L.bbeta.data() : nullptr, flag_.data());
        if (save) copy(L.alpha, L.balpha);
      } else if (mm) {
        cuda::sign_step(dev_, L.alpha.data(), L.da.data(), L.alpha.n, float(mm_lr * decay), true,
                        save ? L.balpha.data() : nullptr, flag_.data());
        cuda::sign_step(dev_, L.beta.data(), L.db.data(), L.beta.n, float(mm_lr * decay), true,
                        save ? L.bbeta.data() : nullptr, flag_.data());
      } else if (save) {
        copy(L.alpha, L.balpha);
        copy(L.beta, L.bbeta);
      }
    }
    int bad = 0;
    dev_.download(&bad, flag_.data(), sizeof(int));
    if (bad) fail(ErrorKind::InvalidInput, "non-finite gradient of the tunables");
    res_.phases.step += since(ts);
  }

  // Layer l's tunables, scale and zero to its host TunedLinear; the weight becomes its QDQ value.
  void download(size_t l) {
    DeviceLinear& L = lin_[l];
    TunedLinear& H = res_.layers[l];
    dev_.download(H.V.f32(), L.V.data(), L.V.bytes());
    dev_.download(H.alpha.f32(), L.alpha.data(), L.alpha.bytes());
    dev_.download(H.beta.f32(), L.beta.data(), L.beta.bytes());
    dev_.download(H.scale.f32(), L.scale.data(), L.scale.bytes());
    if (!H.fp) dev_.download(H.zero.f32(), L.zero.data(), L.zero.bytes());  // a float scheme's stay 0
    Tensor What = Tensor::empty(H.weight->shape(), DType::F32, host_);
    dev_.download(What.f32(), L.What.data(), L.What.bytes());
    *H.weight = What;
  }

  cuda::DeviceContext& dev_;
  Context& host_;
  BlockDims dims_;
  QuantFormat fmt_;
  BlockAux<float> aux_;
  const std::vector<uint8_t>& mask_;
  SignRoundOptions opt_;
  int64_t n_ = 0, B_ = 0, bs_ = 0;
  double denom_ = 1, best_loss_ = INFINITY;
  BlockPtrs<const float*> wp_;
  BlockPtrs<float*> gp_;
  std::map<const float*, cuda::DeviceArray<float>> held_;
  std::vector<DeviceLinear> lin_;
  cuda::DeviceArray<float> x_, y_, xb_, yb_, tb_;
  DeviceRope rope_;
  cuda::DeviceArray<uint8_t> on_;
  cuda::DeviceArray<double> row_loss_;
  cuda::DeviceArray<int> flag_;
  BlockTuneResult res_;
};

}  // namespace

BlockTuneResult signround_tune_block_cuda(cuda::DeviceContext& dev, Context& host, const BlockDims& dims,
                                          BlockWeights& w, const QuantFormat& fmt, const BlockAux<float>& aux,
                                          const Tensor& x_in, const Tensor& y_fp,
                                          const std::vector<uint8_t>& loss_mask, const SignRoundOptions& opt,
                                          const LayerFormats* layers) {
  dev.make_current();
  return DeviceTuner(dev, host, dims, w, fmt, aux, x_in, y_fp, loss_mask, opt, layers).run();
}

}  // namespace ar::quant
