// Whole-model forward (inference): embedding -> decoder blocks -> final norm -> lm_head logits.
// Blocks are materialized one at a time from the memory-mapped checkpoint (streaming mode), or kept
// resident when `resident` is set (generation, which runs the model many times). A checkpoint with
// static FP8 activations (FP8_STATIC) has each quantized Linear read its input through the E4M3 QDQ of
// its stored input_scale, as a W8A8 engine computes it.
#pragma once
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/loader.h"
#include "model/rope_table.h"

namespace ar {

class Transformer {
 public:
  Transformer(const HfModel& model, Context& ctx, bool resident);
  // ids and key_mask (nullable, 1 = real token) are [B, T]. Returns fp32 logits [B*T, vocab].
  Tensor forward_logits(const int32_t* ids, const uint8_t* key_mask, int64_t B, int64_t T);
  // Hidden states after the final norm, [B*T, hidden] (exposed for tests and for eval on slices).
  Tensor forward_hidden(const int32_t* ids, const uint8_t* key_mask, int64_t B, int64_t T);
  const ModelConfig& config() const { return model_.config(); }

  // Incremental decoding (batch 1, resident mode): feeds `n` new tokens after everything fed since
  // the last reset_decode(), reusing cached keys/values; returns logits of the last new token [vocab].
  std::vector<float> decode(const int32_t* ids, int64_t n);
  void reset_decode();

 private:
  const BlockWeights& block(int64_t layer, BlockWeights& scratch);

  const HfModel& model_;
  Context& ctx_;
  bool resident_;
  std::vector<BlockWeights> blocks_;  // resident mode only
  std::vector<ActQdq<float>> act_;    // per block: the Linears' static activation scales (FP8_STATIC)
  float lm_head_act_ = 0;             // lm_head's, 0: none
  const ActQdq<float>* act(int64_t layer) const { return model_.config().quant.act_static ? &act_[size_t(layer)] : nullptr; }
  void lm_head(const float* h, float* logits, int64_t rows);
  Tensor embed_, norm_, lm_head_;
  RopeTables rope_;
  struct DecodeState;
  std::shared_ptr<DecodeState> decode_;  // per-layer KV caches, created on first decode()
  Tensor embed_tokens(const int32_t* ids, int64_t n);
};

}  // namespace ar
