// Perplexity over non-overlapping windows of `ctx` tokens, llama.cpp convention: the first token of
// each window is replaced by BOS (when the model has one) and only the second half is scored
// (positions ctx/2 .. ctx-2 predict the next token), so every scored token has >= ctx/2 context.
// ppl = exp(mean NLL); ppl_stderr = ppl * stderr(mean NLL) (delta method).
#pragma once
#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace ar {

// The shortest window that scores a token (positions ctx/2 .. ctx-2 must not be empty).
constexpr int64_t kMinEvalWindow = 4;

struct PplResult {
  double ppl = 0, ppl_stderr = 0, nll_mean = 0;
  int64_t tokens_scored = 0, windows = 0, ctx = 0;
};

// Quality of `model` against a reference (the unquantized model), on the same windows and scored
// positions, the way llama.cpp's perplexity --kl-divergence reports it:
//   KL(ref || model) per token = sum_v p_ref(v) (log p_ref(v) - log p_model(v)) -> mean, median, p99, max;
//   top-1 agreement = share of positions where both argmaxes agree;
//   delta ppl = ppl(model) - ppl(ref), stderr from the per-token NLL variances and their covariance.
struct CompareResult {
  PplResult model, ref;
  double kl_mean = 0, kl_median = 0, kl_p99 = 0, kl_max = 0, top1_agreement = 0;
  double delta_ppl = 0, delta_ppl_stderr = 0;
};

CompareResult compare_models(Transformer& model, Transformer& ref, const std::vector<int32_t>& tokens, int64_t ctx,
                             int32_t bos, int64_t batch = 4, bool progress = false);

PplResult perplexity(Transformer& model, const std::vector<int32_t>& tokens, int64_t ctx, int32_t bos,
                     int64_t batch = 4, bool progress = false);

}  // namespace ar
