// Greedy generation with a KV cache: the prompt runs in one pass, then one token per step; each
// step appends the argmax of the last position (ties -> lowest id). Stops after n_new tokens, at
// EOS or BOS, or at the model's max_position_embeddings. The Transformer must be resident.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/transformer.h"

namespace ar {

// Returns prompt + generated ids. on_token(prev, next) is called for every generated token.
std::vector<int32_t> generate_greedy(Transformer& model, std::vector<int32_t> prompt, int64_t n_new,
                                     const std::function<void(int32_t, int32_t)>& on_token = {});

}  // namespace ar
