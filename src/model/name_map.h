// Where a checkpoint keeps its language model's tensors. Inside the engine every tensor of the language
// model has its text-model name, the one a *ForCausalLM checkpoint stores: model.embed_tokens.weight,
// model.layers.<i>.<...>, model.norm.weight, lm_head.weight. A multimodal checkpoint
// (Gemma3ForConditionalGeneration) keeps them under a prefix of its own, beside tensors that are not the
// language model's (a vision tower, a projector), which the engine copies unchanged:
//   stored by released checkpoints and by transformers 5's save_pretrained: language_model.model.layers.3...,
//     language_model.lm_head.weight;
//   stored by some conversions, and the modules transformers 5 builds: model.language_model.layers.3...,
//     lm_head.weight.
// The map gives each text-model name its stored name (tensors in every output keep the input's spelling)
// and its module name, the one quantization_config must use (block_name_to_quantize, extra_config,
// ignore lists): transformers + auto-round match those against the modules of the model they build, so
// "language_model.model.layers" (what AutoRound 0.16.1 writes) converts nothing there; vLLM maps both.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ar {

class NameMap {
 public:
  NameMap() = default;  // a text-only checkpoint: every spelling is the text-model name
  // The layout of a multimodal checkpoint from its stored tensor names; InvalidInput (naming `where`)
  // when none or both prefixes hold tensors, or when a tensor outside the language model would read as
  // one of its names.
  static NameMap detect(const std::vector<std::string>& stored, const std::string& where);
  bool multimodal() const { return !model_stored_.empty(); }
  // Whether `name` is a text-model name (model.embed_tokens., model.layers., model.norm., lm_head.).
  static bool is_text(const std::string& name);
  // A text-model name as the checkpoint stores it / as transformers 5 names the module; other names
  // (a vision tower's) are returned unchanged.
  std::string stored(const std::string& name) const;
  std::string module(const std::string& name) const;
  // The text-model name of a stored name; nullopt for a tensor outside the language model.
  std::optional<std::string> text_name(const std::string& stored) const;
  // A layer name a user wrote (--layer_config, --fp_layers) in the stored or the module spelling, as its
  // text-model name; any other text unchanged.
  std::string from_user(const std::string& name) const;

 private:
  std::string model_stored_, head_stored_;  // "language_model.model." / "language_model.lm_head."
  std::string model_module_, head_module_;  // "model.language_model." / "lm_head."
};

}  // namespace ar
