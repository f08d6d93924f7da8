// Hugging Face model directory: config.json + model.safetensors or a sharded
// model.safetensors.index.json. Shards are memory-mapped once; tensors are materialized in fp32 one
// decoder block at a time, so resident memory is about one block plus what the caller keeps.
// At open, every tensor the computation reads is checked for presence, shape (against config.json)
// and a floating-point dtype, and scanned for NaN/Inf (model_check.cpp), so every command refuses a
// bad model before any work; materialized tensors are checked to be finite once more.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/block_impl.h"
#include "model/block_weights.h"
#include "model/config.h"
#include "model/name_map.h"
#include "model/tokenizer/tokenizer.h"

namespace ar {

// Tensors of a model stored in another container than safetensors (a GGUF file: model/gguf_source.h),
// served by HF name in fp32; the source checks presence, shapes and byte ranges when it is built.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual Tensor load(const std::string& name, const Shape& expect, Context& ctx) const = 0;
};

class HfModel {
 public:
  static std::unique_ptr<HfModel> open(const std::string& dir);
  // A model whose tensors come from `source` (dir() is then `path`, the source's file).
  // `context_field` names where the context length came from ("<file>: llama.context_length").
  static std::unique_ptr<HfModel> from_source(const std::string& path, const ModelConfig& cfg,
                                              std::unique_ptr<const TensorSource> source,
                                              const std::string& context_field);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return cfg_; }
  // Where max_position_embeddings came from, for messages: "<dir>/config.json: max_position_embeddings"
  // or "<file>.gguf: llama.context_length".
  const std::string& context_field() const { return context_field_; }
  bool has(const std::string& name) const { return source_ ? source_->has(name) : where_.count(name) > 0; }
  // fp32 copy of a tensor; `expect` (if non-empty) must equal its shape.
  // Packed Linears (quantization_config present, "<prefix>.qweight" instead of ".weight") are
  // dequantized to fp32 here, so everything above the loader sees plain weights.
  Tensor load(const std::string& name, const Shape& expect, Context& ctx) const;
  // The stored bytes of a tensor (any dtype), for copying it unchanged into an output.
  const StTensorInfo& raw_info(const std::string& name, const uint8_t** bytes) const;
  // A tensor copied as is (dtype and shape must match).
  Tensor load_raw(const std::string& name, const Shape& expect, DType dtype, Context& ctx) const;
  BlockWeights load_block(int64_t layer, Context& ctx) const;
  // Whether a MoE layer stores its experts fused (mlp.experts.gate_up_proj) rather than one per expert.
  bool fused_experts(int64_t layer) const;
  Tensor load_embeddings(Context& ctx) const;  // [vocab, hidden]
  Tensor load_final_norm(Context& ctx) const;  // [hidden]
  Tensor load_lm_head(Context& ctx) const;     // [vocab, hidden]; the embeddings when tied
  static std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }
  // The stored tensors whose names start with `prefix` (sorted; a GGUF-backed model: none).
  std::vector<std::string> stored_names(const std::string& prefix) const;
  // Header entry of a tensor (nullptr if absent); `file` gets the shard's path.
  const StTensorInfo* info(const std::string& name, std::string* file = nullptr) const;
  // Where the checkpoint keeps the language model (a multimodal one: under a prefix). Every name the
  // methods above take is a text-model name (model.layers.3...) or, for a tensor outside the language
  // model, its stored name.
  const NameMap& names() const { return names_; }
  // The stored tensors outside the language model (a multimodal checkpoint's vision tower and projector, a
  // text checkpoint's tensors outside model.* and lm_head.*: Qwen3-Next's MTP layers under mtp.*), copied
  // unchanged into every safetensors output; sorted.
  const std::vector<std::string>& foreign_names() const { return foreign_; }

 private:
  void check_tensors() const;                  // model_check.cpp
  void check_layer_count() const;              // model_check.cpp
  void check_expert_tensors() const;           // model_check.cpp
  void check_values() const;                   // model_check.cpp
  void check_unique_across_shards() const;     // model_check.cpp
  bool check_packed(const std::string& weight_name) const;
  void detect_mixtral_spelling();  // moe_load.cpp: cfg_.moe.mixtral_w_names from the tensor names
  void unit_offset(Tensor& norm) const;  // 1 + w for ModelConfig::norm_unit_offset
  void round_embed_scale();              // ModelConfig::embed_scale in the embeddings' stored dtype
  // Elements [offset, offset + numel(shape)) of a stored tensor as fp32 `shape` (an expert of a fused tensor).
  Tensor load_slice(const std::string& name, int64_t offset, const Shape& shape, Context& ctx) const;
  // t's columns (BlockTensor::columns) of its loaded slice, transposed into t.shape (gpt-oss's experts).
  static Tensor stored_columns(const Tensor& slice, const BlockTensor& t, Context& ctx);
  // gpt-oss's MXFP4 experts (mxfp4_experts.cpp): the blocks and scales behind the fused tensor `name` of
  // bf16-layout shape [E, in, out], checked at open; one expert dequantized into that layout [in, out].
  void check_mxfp4_experts(const std::string& name, const Shape& bf16) const;
  Tensor load_mxfp4_expert(const std::string& name, const Shape& bf16, int64_t expert, Context& ctx) const;
  std::string dir_, context_field_;
  ModelConfig cfg_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  struct Stored {
    size_t shard;
    std::string name;  // as the shard stores it
  };
  std::map<std::string, Stored> where_;  // text-model (or foreign) name -> where it is stored
  NameMap names_;
  std::vector<std::string> foreign_;
  void map_names();  // names_, foreign_ (and a multimodal checkpoint's where_ keys)
  // The shard holding a tensor and its header entry; InvalidInput when absent.
  const SafetensorsFile& shard_of(const std::string& name, const StTensorInfo** info) const;
  std::unique_ptr<const TensorSource> source_;  // set: every tensor comes from it (no shards)
};

// The model directory's tokenizer, refused (InvalidInput) when one of its ids could reach or exceed
// config.json's vocab_size (it would index past the embedding table). Every command loads it this way.
std::unique_ptr<Tokenizer> load_tokenizer(const HfModel& model);

// A command that runs `tokens` positions through the model (`what`: "eval", "generate", ...) on a model
// whose context is shorter: InvalidInput naming the model's field ("model.gguf: llama.context_length 1
// is smaller than the 4 tokens eval needs"), before any work.
void require_context(const HfModel& model, int64_t tokens, const std::string& what);

}  // namespace ar
