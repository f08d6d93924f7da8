// Perplexity over non-overlapping windows of `ctx` tokens, llama.cpp convention: the first token of
// each window is replaced by BOS (when the model has one) and only the second half is scored
// (positions ctx/2 .. ctx-2 predict the next token), so every scored token has >= ctx/2 context.
// ppl = exp(mean NLL); ppl_stderr = ppl * stderr(mean NLL) (delta method).
#pragma once
#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace ar {

struct PplResult {
  double ppl = 0, ppl_stderr = 0, nll_mean = 0;
  int64_t tokens_scored = 0, windows = 0, ctx = 0;
};

PplResult perplexity(Transformer& model, const std::vector<int32_t>& tokens, int64_t ctx, int32_t bos,
                     int64_t batch = 4, bool progress = false);

}  // namespace ar
