// Gemma 3 (Gemma3ForCausalLM) end to end on the inference path: config.json parsing in both spellings
// (transformers 5's layer_types and per-layer-type rope_parameters; the released checkpoints' rope_theta,
// rope_local_base_freq, rope_scaling and sliding_window_pattern), Gemma3TextConfig's defaults and the
// refusals, the layer's tensor table (sandwich norms), and the logits of tiny random checkpoints against
// transformers' (tests/data/gemma3, made by tools/make_gemma3_goldens.py): norms applied as 1 + w, the
// embedding scale in the checkpoint's dtype, GeLU-tanh, query_pre_attn_scalar, per-layer RoPE, windows,
// soft-capped logits; incremental decoding against the full forward.
#include "hf_checkpoint.h"
#include "model/block_tensors.h"
#include "model/config.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/gemma3/";

TEST(Gemma3Config, BothSpellingsDescribeTheSameModel) {
  for (const char* dir : {"gemma3/model", "gemma3/legacy"}) {
    const ModelConfig c = load_model_config(kDir + dir + "/config.json");
    SCOPED_TRACE(dir);
    EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
    EXPECT_EQ(c.block_dims(0).window, 4);
    EXPECT_EQ(c.block_dims(1).window, 0);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rope_scaling.type, "linear");
    EXPECT_EQ(c.rope_scaling.factor, 2.0);
    ASSERT_TRUE(c.sliding_rope.has_value());
    EXPECT_EQ(c.sliding_rope->theta, 10000.0);
    EXPECT_EQ(c.sliding_rope->scaling.type, "default");
    EXPECT_EQ(c.ffn_act.kind, GateKind::GeluTanh);
    EXPECT_TRUE(c.qk_norm && c.norm_unit_offset && c.sandwich_norms && c.tie_word_embeddings);
    EXPECT_TRUE(c.block_dims(2).sandwich);
    EXPECT_DOUBLE_EQ(c.attn_scale, 1 / std::sqrt(12.0));
    EXPECT_EQ(c.block_dims(3).scale, c.attn_scale);
    EXPECT_EQ(c.final_logit_softcap, 2.5);
    EXPECT_DOUBLE_EQ(c.embed_scale, std::sqrt(32.0));  // rounded to the stored dtype when the model opens
  }
  EXPECT_EQ(HfModel::open(kDir + "gemma3/model")->config().embed_scale, 5.65625);  // sqrt(32) in bf16
  // Gemma3TextConfig's defaults: every 6th layer global, window 4096, theta 1e6 / 10000, head_dim 256,
  // query_pre_attn_scalar 256, tied embeddings, no soft-cap, BOS 2.
  json j = read_config(kDir + "gemma3/legacy");
  for (const char* k : {"sliding_window_pattern", "sliding_window", "rope_theta", "rope_local_base_freq", "rope_scaling",
                        "head_dim", "query_pre_attn_scalar", "tie_word_embeddings", "final_logit_softcapping",
                        "bos_token_id", "hidden_activation"})
    j.erase(k);
  j["num_hidden_layers"] = 7;
  const ModelConfig d = parse_model_config(j, "cfg.json");
  EXPECT_EQ(d.sliding_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(d.sliding_window, 4096);
  EXPECT_EQ(d.rope_theta, 1e6);
  EXPECT_EQ(d.sliding_rope->theta, 10000.0);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_DOUBLE_EQ(d.attn_scale, 1 / 16.0);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.final_logit_softcap, 0);
  EXPECT_EQ(d.bos_token_id, 2);
}

TEST(Gemma3Config, RefusesWhatItCannotRunNamingTheField) {
  const std::pair<json, const char*> rows[] = {
      {json{{"hidden_activation", "gelu"}}, "hidden_activation: 'gelu' is not supported"},
      {json{{"hidden_act", "silu"}}, "hidden_act: 'silu' is not supported"},
      {json{{"attn_logit_softcapping", 50.0}}, "attn_logit_softcapping"},
      {json{{"final_logit_softcapping", -1.0}}, "final_logit_softcapping"},
      {json{{"query_pre_attn_scalar", 0}}, "query_pre_attn_scalar"},
      {json{{"use_bidirectional_attention", true}}, "use_bidirectional_attention"},
      {json{{"layer_types", {"full_attention"}}}, "layer_types: 1 entries for num_hidden_layers 4"},
      {json{{"rope_parameters", {{"local", {{"rope_theta", 1.0}}}}}}, "'rope_parameters.local': is not a layer type"},
      {json{{"rope_parameters", {{"full_attention", {{"rope_type", "dynamic"}}}}}}, "rope_type 'dynamic' is not supported"},
  };
  for (const auto& [patch, expect] : rows) {
    json j = read_config(kDir + "gemma3/model");
    j.update(patch);
    const std::string err = error_of([&] { parse_model_config(j, "cfg.json"); });
    EXPECT_NE(err.find(expect), std::string::npos) << patch.dump() << ": " << err;
  }
}

// Gemma's names: post_attention_layernorm norms the attention's output; pre_ and post_feedforward_layernorm
// surround the MLP.
TEST(Gemma3Model, TheLayerTableNamesTheSandwichNorms) {
  const ModelConfig c = load_model_config(kDir + "gemma3/model/config.json");
  std::vector<std::string> norms;
  size_t linears = 0;
  BlockWeights w;
  for (const BlockTensor& t : block_tensors(c, 1, false)) {
    if (t.role == TensorRole::Norm) norms.push_back(t.name);
    linears += t.role == TensorRole::Linear;
  }
  EXPECT_EQ(norms, (std::vector<std::string>{"input_layernorm.weight", "post_attention_layernorm.weight",
                                             "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
                                             "self_attn.q_norm.weight", "self_attn.k_norm.weight"}));
  EXPECT_EQ(linears, 7u);
  auto m = HfModel::open(kDir + "gemma3/model");
  Context ctx;
  const BlockWeights b = m->load_block(1, ctx);
  const Tensor stored = m->load("model.layers.1.post_attention_layernorm.weight", {32}, ctx);
  for (int64_t i = 0; i < 32; ++i) ASSERT_EQ(b.ln_post_attn.f32()[i], 1.0f + stored.f32()[i]) << i;  // 1 + w
}

TEST(Gemma3Model, LogitsMatchTransformers) {
  for (const char* c : {"gemma3", "bias"}) {
    const std::string dir = kDir + c;
    const auto ours = expect_matches_golden(dir, dir + "/model", c);
    const GoldenIds g = golden_ids(dir);
    EXPECT_TRUE(logits_of(dir + "/legacy", g.ids, g.B, g.T) == ours) << c << ": the legacy config.json differs";
  }
}

// Incremental decoding through 4-key windows and the two RoPE tables gives the full forward's logits.
TEST(Gemma3Model, DecodeMatchesForward) {
  expect_decode_matches_forward(kDir + "gemma3/model");
}

}  // namespace
