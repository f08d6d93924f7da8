// Qwen3-Next (Qwen3NextForCausalLM) on the inference path: config.json parsing (layer_types or
// full_attention_interval, the linear layers' sizes, partial RoPE, Qwen3NextConfig's defaults) and the
// refusals, the layer tables of both kinds, and the logits of tiny random checkpoints against
// transformers' (tests/data/qwen3_next, made by tools/make_qwen3_next_goldens.py): Gated DeltaNet
// layers, gated full attention, norms applied as 1 + w but the gated norm as w, the MoE with a
// sigmoid-gated shared expert, a 150-token sequence past the 64-token chunks; incremental decoding.
#include "hf_checkpoint.h"
#include "model/block_tensors.h"
#include "model/config.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/qwen3_next/";

TEST(Qwen3NextConfig, ReadsBothLayerKindsAndTheirSizes) {
  const ModelConfig c = load_model_config(kDir + "moe/model/config.json");
  EXPECT_EQ(c.delta_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_EQ(c.rotary_dims, 4);
  EXPECT_TRUE(c.qk_norm && c.norm_unit_offset && c.attn_out_gate);
  EXPECT_EQ(c.delta.Hk, 2);
  EXPECT_EQ(c.delta.Hv, 4);
  EXPECT_EQ(c.delta.Dk, 8);
  EXPECT_EQ(c.delta.Dv, 6);
  EXPECT_EQ(c.delta.K, 4);
  EXPECT_EQ(c.block_dims(0).attn, AttnKind::DeltaNet);
  EXPECT_FALSE(c.block_dims(0).out_gate);
  EXPECT_EQ(c.block_dims(1).attn, AttnKind::Gqa);
  EXPECT_TRUE(c.block_dims(1).out_gate);
  EXPECT_TRUE(c.is_moe_layer(0) && !c.is_moe_layer(1) && c.is_moe_layer(3));
  EXPECT_EQ(c.moe.shared_intermediate, 24);
  EXPECT_TRUE(c.moe.shared_gate && c.moe.norm_topk_prob);
  // Without layer_types: every full_attention_interval-th layer (default 4) is full attention; the other
  // defaults are Qwen3NextConfig's.
  json j = read_config(kDir + "moe/model");
  for (const char* k : {"layer_types", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                        "linear_value_head_dim", "linear_conv_kernel_dim", "rope_parameters", "mlp_only_layers"})
    j.erase(k);
  j["num_hidden_layers"] = 8;
  const ModelConfig d = parse_model_config(j, "cfg.json");
  EXPECT_EQ(d.delta_layers, (std::vector<uint8_t>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(d.delta.Hk, 16);
  EXPECT_EQ(d.delta.Hv, 32);
  EXPECT_EQ(d.delta.Dk, 128);
  EXPECT_EQ(d.delta.Dv, 128);
  EXPECT_EQ(d.rotary_dims, 2);  // 0.25 of head_dim 8
  j["full_attention_interval"] = 2;
  EXPECT_EQ(parse_model_config(j, "cfg.json").delta_layers, (std::vector<uint8_t>{1, 0, 1, 0, 1, 0, 1, 0}));
  j["num_experts"] = 0;
  EXPECT_FALSE(parse_model_config(j, "cfg.json").is_moe());
}

TEST(Qwen3NextConfig, RefusesWhatItCannotRunNamingTheField) {
  const std::pair<json, const char*> rows[] = {
      {json{{"layer_types", {"full_attention"}}}, "layer_types: 1 entries for num_hidden_layers 4"},
      {json{{"layer_types", {"linear_attention", "sliding_attention", "full_attention", "full_attention"}}},
       "layer type 'sliding_attention' is not supported"},
      {json{{"linear_num_value_heads", 3}}, "linear_num_value_heads: 3 is not a multiple of linear_num_key_heads 2"},
      {json{{"linear_conv_kernel_dim", 0}}, "linear_conv_kernel_dim"},
      {json{{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.3}}}},
       "partial_rotary_factor"},
      {json{{"shared_expert_intermediate_size", nullptr}}, "shared_expert_intermediate_size"},
      {json{{"hidden_act", "gelu"}}, "hidden_act"},
      {json{{"linear_key_head_dim", 1 << 13}}, "'linear_key_head_dim': 8192 exceeds the limit"},
  };
  for (const auto& [patch, expect] : rows) {
    json j = read_config(kDir + "moe/model");
    j.update(patch);
    const std::string err = error_of([&] { parse_model_config(j, "cfg.json"); });
    EXPECT_NE(err.find(expect), std::string::npos) << patch.dump() << ": " << err;
  }
}

// A linear layer's table: in_proj_qkvz and out_proj quantized, in_proj_ba kept in 16 bit, the gated norm
// applied as stored; a full layer's q_proj twice the heads' width (the output gate).
TEST(Qwen3NextModel, TheLayerTablesNameBothKinds) {
  const ModelConfig c = load_model_config(kDir + "moe/model/config.json");
  std::vector<std::string> linears, kept;
  for (const BlockTensor& t : block_tensors(c, 0, true)) {
    if (t.role == TensorRole::Linear && t.name.find("experts.") == std::string::npos) linears.push_back(t.name);
    if (t.role == TensorRole::Kept) kept.push_back(t.name);
    if (t.name == "linear_attn.norm.weight") { EXPECT_FALSE(t.unit_offset); }
    if (t.name == "input_layernorm.weight") { EXPECT_TRUE(t.unit_offset); }
    if (t.name == "linear_attn.in_proj_qkvz.weight") { EXPECT_EQ(t.shape, (Shape{2 * (8 + 8 + 2 * 2 * 6), 32})); }
    if (t.name == "linear_attn.conv1d.weight") { EXPECT_EQ(t.shape, (Shape{2 * 8 + 2 * 8 + 4 * 6, 1, 4})); }
  }
  EXPECT_EQ(linears, (std::vector<std::string>{"linear_attn.in_proj_qkvz.weight", "linear_attn.out_proj.weight",
                                               "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
                                               "mlp.shared_expert.down_proj.weight"}));
  EXPECT_EQ(kept, (std::vector<std::string>{"linear_attn.in_proj_ba.weight", "mlp.gate.weight",
                                            "mlp.shared_expert_gate.weight"}));
  for (const BlockTensor& t : block_tensors(c, 1, false))
    if (t.name == "self_attn.q_proj.weight") { EXPECT_EQ(t.shape, (Shape{2 * 4 * 8, 32})); }
  auto m = HfModel::open(kDir + "moe/model");
  Context ctx;
  const BlockWeights b = m->load_block(0, ctx);
  const Tensor norm = m->load("model.layers.0.linear_attn.norm.weight", {6}, ctx);
  const Tensor ln = m->load("model.layers.0.input_layernorm.weight", {32}, ctx);
  for (int64_t i = 0; i < 6; ++i) ASSERT_EQ(b.dnorm.f32()[i], norm.f32()[i]) << i;  // w
  for (int64_t i = 0; i < 32; ++i) ASSERT_EQ(b.ln1.f32()[i], 1.0f + ln.f32()[i]) << i;  // 1 + w
}

// The goldens are the exact model's logits (hf_checkpoint.h's expect_matches_exact_golden).
TEST(Qwen3NextModel, LogitsMatchTransformers) {
  for (const char* c : {"moe", "long"}) expect_matches_exact_golden(kDir + c, c);
}

// Incremental decoding carries the conv's last inputs and the recurrent state (and the full layers' keys):
// 3 tokens, then one at a time, give the whole-sequence forward's logits.
TEST(Qwen3NextModel, DecodeMatchesForward) {
  for (const char* c : {"moe", "long"}) expect_decode_matches_forward(kDir + c + "/model");
}

}  // namespace
