#include "eval/perplexity.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace ar {

PplResult perplexity(Transformer& model, const std::vector<int32_t>& tokens, int64_t ctx, int32_t bos, int64_t batch,
                     bool progress) {
  if (ctx < 4) fail(ErrorKind::InvalidInput, "--ctx must be at least 4 (got " + std::to_string(ctx) + ")");
  const int64_t windows = int64_t(tokens.size()) / ctx;
  if (windows == 0)
    fail(ErrorKind::InvalidInput, "text has " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                                      std::to_string(ctx));
  const int64_t V = model.config().vocab_size, first = ctx / 2;
  Context lctx(Device{}, 1);
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += batch) {
    const int64_t B = std::min(batch, windows - w0);
    std::vector<int32_t> ids(tokens.begin() + w0 * ctx, tokens.begin() + (w0 + B) * ctx);
    if (bos >= 0)
      for (int64_t b = 0; b < B; ++b) ids[size_t(b * ctx)] = bos;
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
    if (progress) std::fprintf(stderr, "\rperplexity: %lld/%lld windows, running ppl %.4f", (long long)(w0 + B),
                               (long long)windows, std::exp(sum / double(count)));
  }
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
