// A decoder layer's tensors in fp32 (BlockWeights), and the table that describes them once (BlockTensor,
// built by model/block_tensors.h from the configuration): the loader fills BlockWeights from the table,
// the model check validates the checkpoint against it, the tuner takes its Linears in linear_slot order,
// the writers pack those and copy every other entry unchanged, and the run summary names what stays in
// 16 bit. No consumer names a block kind's tensors itself.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/block_dims.h"

namespace ar {

struct BlockWeights;

enum class TensorRole : uint8_t {
  Norm,    // a norm's weight
  Bias,    // a Linear's bias
  Linear,  // a quantizable Linear's weight (the table lists them in linear_slot order)
  Kept,    // a Linear that stays in 16 bit by rule (a MoE router, a shared expert's gate): BlockTensor::why
  Buffer,  // a tensor the forward reads that is no Linear, norm or bias (DeepSeek's e_score_correction_bias,
           // gpt-oss's attention sinks), or a non-Linear tensor no module reads, copied unchanged
           // (DeepSeek-V3.2's indexer k_norm)
};

struct BlockTensor {
  std::string name;  // in-block, as every output names it: "self_attn.q_proj.weight", "mlp.experts.3.up_proj.weight"
  Shape shape;
  TensorRole role = TensorRole::Linear;
  // Where the loader puts it: a member of BlockWeights, or entry `index` of a member list (an expert).
  Tensor BlockWeights::* field = nullptr;
  std::vector<Tensor> BlockWeights::* list = nullptr;
  int64_t index = 0;
  // The checkpoint's full name when it is not the layer prefix + name (Mixtral's w1/w3/w2, a fused expert
  // tensor); with offset >= 0 the tensor is elements [offset, offset + numel) of that stored tensor,
  // whose whole shape is stored_shape (transformers 5's fused experts).
  std::string stored{};
  int64_t offset = -1;
  Shape stored_shape{};
  // A tensor stored transposed (gpt-oss's fused experts): the slice at offset is a [rows, cols] matrix
  // and the tensor is the transpose of its columns first, first + step, ...; cols = 0: the slice as is.
  struct Columns {
    int64_t rows = 0, cols = 0, first = 0, step = 1;
  };
  Columns columns{};
  const char* why = nullptr;  // Kept: what the report says ("MoE router")
  // Norm: whether ModelConfig::norm_unit_offset's 1 + w applies (Qwen3-Next's gated norm is applied as w
  // while its other norms are 1 + w).
  bool unit_offset = true;

  Tensor& in(BlockWeights& w) const;
  const Tensor& in(const BlockWeights& w) const { return in(const_cast<BlockWeights&>(w)); }
  // The in-block module name of a Linear ("self_attn.q_proj"): name without ".weight".
  std::string module() const { return name.substr(0, name.size() - 7); }
};

// fp32 tensors of one decoder block, with the table they were loaded from.
struct BlockWeights {
  Tensor ln1, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, bo, ln2, wg, wu, wd;
  Tensor sinks;  // gpt-oss's attention sinks [H]
  Tensor ln_post_attn, ln_post_ffn;  // Gemma's sandwich norms (BlockDims::sandwich)
  // Multi-head latent attention (model/attention_mla.h; wq is q_proj without q_lora, wo is o_proj).
  Tensor q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b;
  // Gated DeltaNet (model/attention_delta.h; wo is out_proj).
  Tensor in_qkvz, in_ba, conv, dt_bias, A_log, dnorm, in_z, in_b, in_a;
  // A MoE layer's feed-forward (model/moe_names.h): router (its bias, the score-correction bias), experts
  // (one Tensor per expert Linear, in either checkpoint layout; gpt-oss: their biases), the shared expert
  // and its gate.
  Tensor router, router_bias, score_bias, sg, su, sd, sgate;
  std::vector<Tensor> eg, eu, ed, ebg, ebu, ebd;
  // Tensors copied unchanged that no module reads (DeepSeek-V3.2's sparse-attention indexer).
  std::vector<Tensor> carried;
  bool mixtral_names = false;  // the experts' Linears are block_sparse_moe.experts.<e>.gate_proj ... (Mixtral)
  AttnKind attn = AttnKind::Gqa;
  std::vector<BlockTensor> tensors;  // the table (model/block_tensors.h)

  BlockPtrs<const float*> ptrs() const;
  // Sizes every member list (experts, carried) to hold the table's entries.
  void size_lists() {
    for (const BlockTensor& t : tensors)
      if (t.list && (this->*t.list).size() <= size_t(t.index)) (this->*t.list).resize(size_t(t.index) + 1);
  }
  size_t bytes() const;
};

inline Tensor& BlockTensor::in(BlockWeights& w) const { return field ? w.*field : (w.*list)[size_t(index)]; }

}  // namespace ar
