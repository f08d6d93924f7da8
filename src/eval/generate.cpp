#include "eval/generate.h"

#include "core/error.h"

namespace ar {

std::vector<int32_t> generate_greedy(Transformer& model, std::vector<int32_t> ids, int64_t n_new,
                                     const std::function<void(int32_t, int32_t)>& on_token) {
  if (ids.empty()) fail(ErrorKind::InvalidInput, "generation needs at least one prompt token");
  const auto& c = model.config();
  model.reset_decode();
  std::vector<float> logits = model.decode(ids.data(), int64_t(ids.size()));  // prompt in one pass
  for (int64_t step = 0; step < n_new && int64_t(ids.size()) < c.context_tokens(); ++step) {
    if (step > 0) logits = model.decode(&ids.back(), 1);
    const float* last = logits.data();
    int32_t best = 0;
    for (int32_t v = 1; v < c.vocab_size; ++v)
      if (last[v] > last[best]) best = v;
    if (best == c.eos_token_id || best == c.bos_token_id) break;
    if (on_token) on_token(ids.back(), best);
    ids.push_back(best);
  }
  return ids;
}

}  // namespace ar
