// Model configuration from an HF config.json, validated against the architecture registry.
// Unknown architectures and unsupported fields (non-silu activations, MLP bias, unknown rope_scaling
// types, ...) are refused with the file and field named.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "model/block_impl.h"

namespace ar {

struct RopeScaling {
  std::string type = "default";  // "default" | "linear" (positions divided by factor) | "llama3" | "yarn"
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
  // yarn (transformers' _compute_yarn_parameters): the ramp's bounds, the cos/sin factor (0: from factor,
  // mscale and mscale_all_dim), whether the correction range is rounded outwards.
  double beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0, attention_factor = 0;
  bool truncate = true;
};

// Multi-head latent attention's sizes (DeepSeek-V2/V3, Kimi K2: model/attention_mla.h); kv_lora_rank = 0
// for every other model.
struct MlaConfig {
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;
  // DeepSeek-V3.2's sparse-attention indexer (self_attn.indexer.*): kept in 16 bit and copied, never run
  // (dense_limit = index_topk keeps sequences where it selects every token); 0 heads: none.
  int64_t indexer_heads = 0, indexer_head_dim = 0;
};

// quantization_config of a directory written by a quantizer (ours or AutoRound/GPTQ/llm-compressor);
// the loader dequantizes such weights to fp32 on load (model/quant_config.cpp parses it).
enum class FloatQuant : uint8_t {
  None,
  Mxfp4,  // weight_packed U8 [out, in/2] (E2M1 pairs, low nibble first), weight_scale U8 E8M0 [out, in/32]
  Mxfp8,  // weight F8_E4M3 [out, in], weight_scale U8 E8M0 [out, in/32]
  Nvfp4,  // weight_packed as MXFP4, weight_scale F8_E4M3 [out, in/16], weight_global_scale F32 [1]
  Fp8,    // weight F8_E4M3 [out, in], weight_scale float: [out, 1] channel, [1] tensor, [out/b0, in/b1] block
};

struct QuantConfig {
  bool present = false;
  int bits = 16;
  int64_t group_size = -1;
  bool sym = true;
  bool zero_minus_one = true;  // auto_round:auto_gptq and gptq store zp - 1; "auto_round" stores zp
  bool awq = false;            // AWQ GEMM layout (auto_round:auto_awq, quant_method awq)
  FloatQuant fp = FloatQuant::None;  // compressed-tensors float formats (and AutoRound's llm_compressor packing)
  int64_t block_rows = 0, block_cols = 0;  // FP8 per-block scales (block_structure / weight_block_size)
  // The FP8 scales' name: compressed-tensors' "weight_scale"; transformers' fine-grained FP8
  // (quant_method fp8: DeepSeek-V3, Kimi K2, Qwen3 FP8) stores the same multiplier as "weight_scale_inv".
  std::string fp8_scale = "weight_scale";
  // FP8_STATIC: E4M3 activations with one static scale per Linear input ("<prefix>.input_scale"). Other
  // activation schemes (dynamic ones, which need a runtime quantizer) are not applied: eval scores
  // their weights.
  bool act_static = false;
  // gpt-oss's release (quant_method "mxfp4"): only the fused experts are quantized, stored as
  // <name>_blocks / <name>_scales (model/mxfp4_experts.cpp); every other tensor is 16 bit. present stays
  // false: no Linear is read packed.
  bool mxfp4_experts = false;
  // Packed Linears of their own bits and group size (an auto_round extra_config entry, a gptq
  // `dynamic` "+:" override; --layer_config writes them): exact module names, then patterns in order
  // (extra_config's searched, dynamic's matched from the start, as gptqmodel does; the first wins).
  struct Packing {
    int bits = 4;
    int64_t group_size = 128;
  };
  std::map<std::string, Packing> layers;
  struct PackingPattern {
    std::regex re;
    bool from_start = false;
    Packing p;
  };
  std::vector<PackingPattern> patterns;
  // The packing of a Linear by its names (model.layers.3.mlp.down_proj; a multimodal checkpoint's
  // module and stored spellings too: model/name_map.h), the first name that an entry names or matches.
  Packing packing(const std::vector<std::string>& names) const {
    for (const std::string& n : names)
      if (auto it = layers.find(n); it != layers.end()) return it->second;
    for (const auto& pt : patterns)
      for (const std::string& n : names)
        if (std::regex_search(n, pt.re, pt.from_start ? std::regex_constants::match_continuous
                                                      : std::regex_constants::match_default))
          return pt.p;
    return {bits, group_size};
  }
};

// Mixture-of-experts feed-forward (Qwen3-MoE, Qwen2-MoE, Mixtral): num_experts = 0 for a dense model.
// A layer is MoE unless listed in mlp_only_layers or off the decoder_sparse_step grid (transformers'
// rule); the others keep the dense MLP of intermediate_size.
struct MoeConfig {
  int64_t num_experts = 0, top_k = 0;
  int64_t expert_intermediate = 0;  // moe_intermediate_size (Mixtral: intermediate_size)
  int64_t shared_intermediate = 0;  // Qwen2-MoE's shared expert (0: none)
  bool norm_topk_prob = false;      // renormalize the top-k probabilities to sum 1
  int64_t sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // Mixtral: the experts live under block_sparse_moe; the checkpoint spells their Linears w1/w3/w2
  // (mixtral_w_names, the original checkpoints) or gate_proj/up_proj/down_proj (what AutoRound writes
  // and transformers 5 + auto-round read back): HfModel::open detects which.
  bool mixtral_names = false;
  bool mixtral_w_names = true;
  // Routing (model/moe_router.h): softmax top-k, or DeepSeek's sigmoid over expert groups with a
  // score-correction bias (mlp.gate.e_score_correction_bias) and a routed scaling factor.
  Routing routing = Routing::SoftmaxTopK;
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1;
  // The shared expert's module ("shared_expert": Qwen2-MoE, behind shared_expert_gate; "shared_experts":
  // DeepSeek, ungated) and the layers before first_dense that keep a dense MLP (first_k_dense_replace).
  std::string shared_module = "shared_expert";
  bool shared_gate = true;
  int64_t first_dense = 0;
  // gpt-oss: the router is mlp.router (weight and bias), each expert's gate, up and down carry biases, and
  // transformers 5's fused tensors are mlp.experts.gate_up_proj [E, C, 2I] (gate and up interleaved by
  // column) + gate_up_proj_bias [E, 2I], down_proj [E, I, C] + down_proj_bias [E, C]: each Linear stored
  // transposed (model/moe_names.h).
  bool gpt_oss = false;
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  // A multimodal checkpoint (Gemma3ForConditionalGeneration): the fields above come from config.json's
  // text_config, the language model's tensors sit under a prefix (model/name_map.h) and the other
  // tensors (vision tower, projector) are copied unchanged into every safetensors output.
  bool multimodal = false;
  int64_t hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false, o_bias = false, qk_norm = false;
  int64_t rotary_dims = 0;  // partial RoPE (GLM-4.5's partial_rotary_factor): a head's first dims rotated (0: all)
  // Sliding-window attention computed exactly (gpt-oss): the layers sliding_layers marks (layer_types'
  // "sliding_attention") see their sliding_window latest keys; the others every earlier key.
  int64_t sliding_window = 0;
  std::vector<uint8_t> sliding_layers;  // 1: a sliding-window layer
  bool attn_sinks = false;  // gpt-oss: self_attn.sinks [H], a logit per head in the softmax's denominator
  GateAct ffn_act;          // the feed-forward's gated activation (gpt-oss: the clamped SwiGLU, Gemma: GeLU-tanh)
  // The sliding layers' own RoPE (Gemma 3: rope_local_base_freq, or rope_parameters' sliding_attention);
  // unset: every layer runs the model's (rope_theta, rope_scaling, which the full layers always run).
  struct LayerRope {
    double theta = 10000;
    RopeScaling scaling;
  };
  std::optional<LayerRope> sliding_rope;
  // Gemma: RMSNorm weights stored as w and applied as 1 + w (HfModel adds the 1 on load; GGUF files hold
  // 1 + w already), sandwich norms (post_attention_layernorm after the attention, pre_ and
  // post_feedforward_layernorm around the MLP: BlockDims::sandwich), the embeddings times embed_scale
  // (0: none; sqrt(hidden_size) rounded to the embedding's stored dtype, as transformers multiplies),
  // the GQA softmax scale (0: 1/sqrt(head_dim); query_pre_attn_scalar^-1/2), and logits soft-capped as
  // cap tanh(logits / cap) (final_logit_softcapping; 0: none).
  bool norm_unit_offset = false, sandwich_norms = false;
  double embed_scale = 0, attn_scale = 0, final_logit_softcap = 0;
  // Sequences up to this many tokens attend densely (causal attention over all of them), as we compute
  // it; longer ones are refused (0: no limit). Mistral's sliding_window, DeepSeek-V3.2's index_topk (its
  // indexer keeps every token up to there): dense_limit_field names the config field.
  int64_t dense_limit = 0;
  std::string dense_limit_field;
  // The longest sequence we run: max_position_embeddings, or dense_limit where shorter.
  int64_t context_tokens() const {
    return dense_limit > 0 && dense_limit < max_position_embeddings ? dense_limit : max_position_embeddings;
  }
  int64_t bos_token_id = -1, eos_token_id = -1;
  QuantConfig quant;
  MoeConfig moe;
  MlaConfig mla;
  // Multi-token-prediction layers stored past num_layers (DeepSeek's num_nextn_predict_layers): not run,
  // copied unchanged into every output.
  int64_t mtp_layers = 0;
  // Hybrid models (Qwen3-Next, Qwen3.5): the layers layer_types calls "linear_attention" (1 here) run Gated
  // DeltaNet (model/attention_delta.h) of the sizes in `delta`; the others grouped-query attention, with
  // Qwen3-Next's sigmoid output gate where attn_out_gate (BlockDims::out_gate).
  std::vector<uint8_t> delta_layers;
  DeltaDims delta;
  bool attn_out_gate = false;
  // Qwen3.5's interleaved mRoPE sections (rope_parameters.mrope_section): one position for text, so plain
  // RoPE here; kept for the GGUF key rope.dimension_sections.
  std::vector<int64_t> mrope_section;

  bool is_moe() const { return moe.num_experts > 0; }
  bool is_mla() const { return mla.kv_lora_rank > 0; }
  // The rotated dims of a head, which the RoPE tables cover (MLA: qk_rope_head_dim).
  int64_t rope_dims() const { return is_mla() ? mla.qk_rope_head_dim : rotary_dims ? rotary_dims : head_dim; }
  // The softmax's scale of q k^T (0: 1/sqrt of the query head; MLA with YaRN folds mscale_all_dim in).
  double attention_scale() const;
  bool is_moe_layer(int64_t layer) const;
  bool is_delta_layer(int64_t layer) const {
    return layer >= 0 && layer < int64_t(delta_layers.size()) && delta_layers[size_t(layer)];
  }
  // The block's shapes; a MoE layer's carry its experts (BlockDims::moe).
  BlockDims block_dims(int64_t layer) const;
};

// `path` names the file in errors.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& path);
ModelConfig load_model_config(const std::string& config_json_path);
// Refuses (InvalidInput, naming the field) sizes above generous per-field limits or whose products
// would need absurd memory; called by parse_model_config before anything is allocated (config_limits.cpp).
void check_config_limits(const ModelConfig& c, const std::string& path);
// Refuses (Unsupported) `tokens` beyond the model's dense_limit, naming `what` ("sequence", "--seqlen")
// and the config field.
void check_dense_limit(const ModelConfig& c, int64_t tokens, const std::string& what = "sequence");

}  // namespace ar
