// GLM-4.5 / 4.6 / 4.5-Air (Glm4MoeForCausalLM) end to end on the inference path: config.json parsing
// (partial RoPE, biases, q/k norm, the sigmoid router's fields) and refusals, the layer's tensor table,
// and the logits of tiny random checkpoints against transformers' in both expert layouts
// (tests/data/glm4_moe, made by tools/make_sigmoid_moe_goldens.py).
#include "hf_checkpoint.h"
#include "model/block_tensors.h"
#include "model/config.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/glm4_moe/";

TEST(GlmConfig, ParsesPartialRopeBiasesAndRouting) {
  const ModelConfig c = load_model_config(kDir + "glm45/model/config.json");
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_dims(), 4);  // partial_rotary_factor 0.5
  EXPECT_EQ(c.block_dims(0).rope, 4);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.moe.routing, Routing::SigmoidGroups);
  EXPECT_EQ(c.moe.routed_scaling_factor, 1.5);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(2));
  const ModelConfig q = load_model_config(kDir + "glm_qk_norm/model/config.json");
  EXPECT_TRUE(q.qk_norm);
  EXPECT_EQ(q.rope_dims(), 2);
  EXPECT_EQ(q.moe.n_group, 4);
  json top = read_config(kDir + "glm45/model");  // the factor at the top level, as older configs keep it
  top["rope_parameters"].erase("partial_rotary_factor");
  top["partial_rotary_factor"] = 0.25;
  EXPECT_EQ(parse_model_config(top, "cfg.json").rope_dims(), 2);
  top.erase("partial_rotary_factor");  // absent: Glm4MoeConfig's 0.5
  EXPECT_EQ(parse_model_config(top, "cfg.json").rope_dims(), 4);
}

TEST(GlmConfig, RefusesWhatItCannotRunNamingTheField) {
  const std::pair<json, const char*> rows[] = {
      {json{{"partial_rotary_factor", 0.3}}, "partial_rotary_factor"},
      {json{{"n_group", 3}}, "n_group: does not divide n_routed_experts 8"},
      {json{{"routed_scaling_factor", -1}}, "routed_scaling_factor"},
      {json{{"num_nextn_predict_layers", 99}}, "num_nextn_predict_layers"},
  };
  for (const auto& [patch, expect] : rows) {
    json j = read_config(kDir + "glm45/model");
    j["rope_parameters"].erase("partial_rotary_factor");
    j.update(patch);
    const std::string err = error_of([&] { parse_model_config(j, "cfg.json"); });
    EXPECT_NE(err.find(expect), std::string::npos) << patch.dump() << ": " << err;
  }
  json llama = read_config(kDir + "glm45/model");  // partial RoPE on an architecture without it
  llama["architectures"] = {"LlamaForCausalLM"};
  EXPECT_NE(error_of([&] { parse_model_config(llama, "cfg.json"); }).find("partial_rotary_factor"), std::string::npos);
}

TEST(GlmModel, TheLayerTableNamesEveryTensor) {
  const ModelConfig c = load_model_config(kDir + "glm_qk_norm/model/config.json");
  std::vector<std::string> front;
  size_t linears = 0;
  for (const BlockTensor& t : block_tensors(c, 1, false)) {
    if (t.role == TensorRole::Linear) ++linears;
    else front.push_back(t.name);
  }
  EXPECT_EQ(linears, 4u + 3 * 8 + 3);
  const std::vector<std::string> want = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                         "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                                         "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                                         "mlp.gate.e_score_correction_bias", "mlp.gate.weight"};
  EXPECT_EQ(front, want);
}

TEST(GlmModel, LogitsMatchTransformersInBothLayouts) {
  for (const char* c : {"glm45", "glm_qk_norm"}) expect_logits_match_transformers(kDir + c, c);
}

}  // namespace
