#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/dequant_float.h"

namespace ar {

namespace {
// Finite weights can still overflow fp32 in the activations (a huge norm weight or projection): without
// this check eval printed perplexity nan, logits wrote inf and generate stopped at once, all with exit 0.
// One pass over what a stage already wrote (an exponent test that vectorizes), once per block output and
// once over the logits, is negligible next to the stage's matrix products.
void check_activations(const HfModel& m, const float* p, int64_t n, const std::string& stage) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, p + i, sizeof b);
    bad |= uint32_t((b & 0x7f800000u) == 0x7f800000u);
  }
  if (!bad) return;
  int64_t i = 0;
  while (std::isfinite(p[i])) ++i;
  fail(ErrorKind::InvalidInput, m.dir() + ": " + stage + ": non-finite activation " +
                                    (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") + " at element " +
                                    std::to_string(i) + " (finite weights whose products overflow fp32)");
}

std::string block_stage(int64_t layer) {
  return "block " + std::to_string(layer) + " (" + HfModel::layer_prefix(layer) + "*) output";
}
}  // namespace

Transformer::Transformer(const HfModel& model, Context& ctx, bool resident)
    : model_(model), ctx_(ctx), resident_(resident) {
  const auto& c = model.config();
  embed_ = model.load_embeddings(ctx);
  norm_ = model.load_final_norm(ctx);
  lm_head_ = c.tie_word_embeddings ? embed_ : model.load_lm_head(ctx);
  rope_ = make_rope_tables(c, c.max_position_embeddings);
  if (c.quant.act_static) {
    for (int64_t l = 0; l < c.num_layers; ++l) act_.push_back(block_input_scales(model, l));
    if (!c.tie_word_embeddings) lm_head_act_ = static_input_scale(model, "lm_head", {c.vocab_size, c.hidden_size});
  }
  if (resident)
    for (int64_t l = 0; l < c.num_layers; ++l) blocks_.push_back(model.load_block(l, ctx));
}

const BlockWeights& Transformer::block(int64_t layer, BlockWeights& scratch) {
  if (resident_) return blocks_[size_t(layer)];
  scratch = model_.load_block(layer, ctx_);
  return scratch;
}

struct Transformer::DecodeState {
  std::vector<BlockRunner<cpu::CpuOps>::KvCache> kv;
  int64_t pos = 0;
};

void Transformer::reset_decode() { decode_.reset(); }

std::vector<float> Transformer::decode(const int32_t* ids, int64_t n) {
  const auto& c = model_.config();
  if (!resident_) fail(ErrorKind::Internal, "decode() needs a resident Transformer");
  cpu::CpuOps ops{ctx_};
  if (!decode_) {
    decode_ = std::make_shared<DecodeState>();
    for (int64_t l = 0; l < c.num_layers; ++l)
      decode_->kv.push_back(BlockRunner<cpu::CpuOps>(ops, c.block_dims(l)).make_kv_cache(c.max_position_embeddings));
  }
  if (decode_->pos + n > c.max_position_embeddings)
    fail(ErrorKind::InvalidInput, "sequence of " + std::to_string(decode_->pos + n) +
                                      " tokens exceeds max_position_embeddings " +
                                      std::to_string(c.max_position_embeddings));
  check_dense_limit(c, decode_->pos + n);
  const int64_t C = c.hidden_size;
  Tensor x = embed_tokens(ids, n), y = Tensor::empty({n, C}, DType::F32, ctx_);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(decode_->pos + i);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const RopeTable& rope = rope_.layer(l);
    BlockAux<float> aux{1, n, pos.data(), rope.cos.data(), rope.sin.data(), nullptr};
    BlockRunner<cpu::CpuOps> runner(ops, c.block_dims(l));
    BlockRunner<cpu::CpuOps>::Cache cache;
    runner.forward(blocks_[size_t(l)].ptrs(), aux, x.f32(), y.f32(), cache, &decode_->kv[size_t(l)], act(l));
    check_activations(model_, y.f32(), n * C, block_stage(l));
    std::swap(x, y);
  }
  decode_->pos += n;
  std::vector<float> h(static_cast<size_t>(C)), logits(static_cast<size_t>(c.vocab_size));
  cpu::rmsnorm_fwd(ctx_, x.f32() + (n - 1) * C, norm_.f32(), h.data(), nullptr, 1, C, c.rms_norm_eps);
  lm_head(h.data(), logits.data(), 1);
  check_activations(model_, logits.data(), c.vocab_size, "final norm and lm_head output (logits)");
  return logits;
}

Tensor Transformer::embed_tokens(const int32_t* ids, int64_t n) {
  const auto& c = model_.config();
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail(ErrorKind::InvalidInput, "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                        " is outside the vocabulary of " + std::to_string(c.vocab_size));
  Tensor x = Tensor::empty({n, c.hidden_size}, DType::F32, ctx_);
  cpu::embedding_fwd(ctx_, embed_.f32(), ids, x.f32(), n, c.hidden_size, c.embed_scale > 0 ? float(c.embed_scale) : 1.f);
  return x;
}

Tensor Transformer::forward_hidden(const int32_t* ids, const uint8_t* key_mask, int64_t B, int64_t T) {
  const auto& c = model_.config();
  if (T > c.max_position_embeddings)
    fail(ErrorKind::InvalidInput, "sequence of " + std::to_string(T) + " tokens exceeds max_position_embeddings " +
                                      std::to_string(c.max_position_embeddings));
  check_dense_limit(c, T);
  const int64_t N = B * T, C = c.hidden_size;
  Tensor x = embed_tokens(ids, N), y = Tensor::empty({N, C}, DType::F32, ctx_);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[size_t(i)] = int32_t(i % T);
  cpu::CpuOps ops{ctx_};
  BlockWeights scratch;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const RopeTable& rope = rope_.layer(l);
    BlockAux<float> aux{B, T, pos.data(), rope.cos.data(), rope.sin.data(), key_mask};
    const BlockWeights& w = block(l, scratch);
    BlockRunner<cpu::CpuOps> runner(ops, c.block_dims(l));
    BlockRunner<cpu::CpuOps>::Cache cache;
    runner.forward(w.ptrs(), aux, x.f32(), y.f32(), cache, nullptr, act(l));
    check_activations(model_, y.f32(), N * C, block_stage(l));
    std::swap(x, y);
  }
  cpu::rmsnorm_fwd(ctx_, x.f32(), norm_.f32(), y.f32(), nullptr, N, C, c.rms_norm_eps);
  return y;
}

Tensor Transformer::forward_logits(const int32_t* ids, const uint8_t* key_mask, int64_t B, int64_t T) {
  const auto& c = model_.config();
  Tensor h = forward_hidden(ids, key_mask, B, T);
  Tensor logits = Tensor::empty({B * T, c.vocab_size}, DType::F32, ctx_);
  lm_head(h.f32(), logits.f32(), B * T);
  check_activations(model_, logits.f32(), B * T * c.vocab_size, "final norm and lm_head output (logits)");
  return logits;
}

void Transformer::lm_head(const float* h, float* logits, int64_t rows) {
  const auto& c = model_.config();
  const int64_t C = c.hidden_size;
  Tensor hq;
  if (lm_head_act_ > 0) {  // its input through the activation QDQ
    hq = Tensor::empty({rows, C}, DType::F32, ctx_);
    cpu::act_qdq_fwd(ctx_, h, lm_head_act_, hq.f32(), rows * C);
    h = hq.f32();
  }
  cpu::linear_fwd(ctx_, h, lm_head_.f32(), nullptr, logits, rows, C, c.vocab_size);
  if (const double cap = c.final_logit_softcap; cap > 0)  // final_logit_softcapping: cap tanh(logits / cap)
    for (int64_t i = 0; i < rows * c.vocab_size; ++i) logits[i] = float(cap * std::tanh(double(logits[i]) / cap));
}

}  // namespace ar
