#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace ar {

namespace {
struct Moments {  // running sums for mean / variance / covariance
  double n = 0, sa = 0, saa = 0, sb = 0, sbb = 0, sab = 0;
  void add(double a, double b) {
    n += 1; sa += a; saa += a * a; sb += b; sbb += b * b; sab += a * b;
  }
  double var_mean_a() const { return n > 1 ? (saa / n - (sa / n) * (sa / n)) / (n - 1) : 0; }
  double var_mean_b() const { return n > 1 ? (sbb / n - (sb / n) * (sb / n)) / (n - 1) : 0; }
  double cov_mean() const { return n > 1 ? (sab / n - (sa / n) * (sb / n)) / (n - 1) : 0; }
};

PplResult finish(double mean, double var_mean, int64_t count, int64_t windows, int64_t ctx) {
  PplResult r;
  r.ctx = ctx;
  r.windows = windows;
  r.tokens_scored = count;
  r.nll_mean = mean;
  r.ppl = std::exp(mean);
  r.ppl_stderr = r.ppl * std::sqrt(std::max(0.0, var_mean));
  return r;
}
// Cuts tokens into windows of ctx (first token -> BOS) and calls fn(ids, B, done) per batch of B
// windows; returns the number of windows.
int64_t for_each_window_batch(const std::vector<int32_t>& tokens, int64_t ctx, int32_t bos, int64_t batch,
                              const std::function<void(const std::vector<int32_t>&, int64_t, int64_t)>& fn) {
  if (ctx < kMinEvalWindow)
    fail(ErrorKind::InvalidInput, "--ctx must be at least " + std::to_string(kMinEvalWindow) + " (got " +
                                      std::to_string(ctx) + ")");
  const int64_t windows = int64_t(tokens.size()) / ctx;
  if (windows == 0)
    fail(ErrorKind::InvalidInput, "text has " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                                      std::to_string(ctx));
  for (int64_t w0 = 0; w0 < windows; w0 += batch) {
    const int64_t B = std::min(batch, windows - w0);
    std::vector<int32_t> ids(tokens.begin() + w0 * ctx, tokens.begin() + (w0 + B) * ctx);
    if (bos >= 0)
      for (int64_t b = 0; b < B; ++b) ids[size_t(b * ctx)] = bos;
    fn(ids, B, w0 + B);
  }
  return windows;
}
}  // namespace

CompareResult compare_models(Transformer& model, Transformer& ref, const std::vector<int32_t>& tokens, int64_t ctx,
                             int32_t bos, int64_t batch, bool progress) {
  if (model.config().vocab_size != ref.config().vocab_size)
    fail(ErrorKind::InvalidInput, "reference model has a vocabulary of " + std::to_string(ref.config().vocab_size) +
                                      " tokens, the model " + std::to_string(model.config().vocab_size) +
                                      ": KL divergence needs the same vocabulary");
  const int64_t V = model.config().vocab_size, first = ctx / 2;
  Context lctx(Device{}, 1);
  Moments m;
  std::vector<double> kls;
  int64_t agree = 0;
  std::vector<float> lp(static_cast<size_t>(V)), lq(static_cast<size_t>(V));
  const int64_t windows = for_each_window_batch(tokens, ctx, bos, batch, [&](const std::vector<int32_t>& ids,
                                                                            int64_t B, int64_t done) {
    Tensor zq = model.forward_logits(ids.data(), nullptr, B, ctx);
    Tensor zp = ref.forward_logits(ids.data(), nullptr, B, ctx);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = first; i < ctx - 1; ++i) {
        const int64_t row = b * ctx + i;
        cpu::log_softmax(lctx, zq.f32() + row * V, lq.data(), 1, V);
        cpu::log_softmax(lctx, zp.f32() + row * V, lp.data(), 1, V);
        double kl = 0;
        int32_t amq = 0, amp = 0;
        for (int64_t v = 0; v < V; ++v) {
          kl += std::exp(double(lp[size_t(v)])) * (double(lp[size_t(v)]) - double(lq[size_t(v)]));
          if (lq[size_t(v)] > lq[size_t(amq)]) amq = int32_t(v);
          if (lp[size_t(v)] > lp[size_t(amp)]) amp = int32_t(v);
        }
        kls.push_back(kl);
        agree += amq == amp;
        const int32_t next = ids[size_t(row + 1)];
        m.add(-double(lq[size_t(next)]), -double(lp[size_t(next)]));
      }
    if (progress) std::fprintf(stderr, "\rcompare: %lld windows", (long long)done);
  });
  if (progress) std::fprintf(stderr, "\n");
  CompareResult r;
  const int64_t n = int64_t(kls.size());
  r.model = finish(m.sa / m.n, m.var_mean_a(), n, windows, ctx);
  r.ref = finish(m.sb / m.n, m.var_mean_b(), n, windows, ctx);
  double sum = 0;
  for (double k : kls) sum += k;
  r.kl_mean = sum / double(n);
  std::vector<double> sorted = kls;
  std::sort(sorted.begin(), sorted.end());
  r.kl_median = n % 2 ? sorted[size_t(n / 2)] : 0.5 * (sorted[size_t(n / 2 - 1)] + sorted[size_t(n / 2)]);
  r.kl_p99 = sorted[size_t(std::min<int64_t>(n - 1, int64_t(std::ceil(0.99 * double(n))) - 1))];
  r.kl_max = sorted.back();
  r.top1_agreement = double(agree) / double(n);
  r.delta_ppl = r.model.ppl - r.ref.ppl;
  double var = r.model.ppl * r.model.ppl * m.var_mean_a() + r.ref.ppl * r.ref.ppl * m.var_mean_b() -
               2 * r.model.ppl * r.ref.ppl * m.cov_mean();
  r.delta_ppl_stderr = std::sqrt(std::max(0.0, var));
  return r;
}

PplResult perplexity(Transformer& model, const std::vector<int32_t>& tokens, int64_t ctx, int32_t bos, int64_t batch,
                     bool progress) {
  const int64_t V = model.config().vocab_size, first = ctx / 2;
  Context lctx(Device{}, 1);
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  const int64_t windows = for_each_window_batch(tokens, ctx, bos, batch, [&](const std::vector<int32_t>& ids,
                                                                            int64_t B, int64_t done) {
    Tensor logits = model.forward_logits(ids.data(), nullptr, B, ctx);
    std::vector<float> logp(static_cast<size_t>(V));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = first; i < ctx - 1; ++i) {
        cpu::log_softmax(lctx, logits.f32() + (b * ctx + i) * V, logp.data(), 1, V);
        double nll = -double(logp[size_t(ids[size_t(b * ctx + i + 1)])]);
        sum += nll;
        sum2 += nll * nll;
        ++count;
      }
    if (progress)
      std::fprintf(stderr, "\rperplexity: %lld windows, running ppl %.4f", (long long)done, std::exp(sum / double(count)));
  });
  if (progress) std::fprintf(stderr, "\n");
  PplResult r;
  r.ctx = ctx;
  r.windows = windows;
  r.tokens_scored = count;
  r.nll_mean = sum / double(count);
  double var = count > 1 ? (sum2 / double(count) - r.nll_mean * r.nll_mean) * double(count) / double(count - 1) : 0;
  r.ppl = std::exp(r.nll_mean);
  r.ppl_stderr = r.ppl * std::sqrt(std::max(0.0, var) / double(count));
  return r;
}

}  // namespace ar
