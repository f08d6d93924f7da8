// DeepSeek-V3 (and Kimi K2, DeepSeek-V2-Lite's attention) end to end on the inference path: config.json
// parsing and refusals, the layer's tensor table, the logits of tiny random checkpoints against
// transformers' (tests/data/deepseek_v3, made by tools/make_mla_goldens.py) in both expert layouts, and
// incremental decoding through latent attention.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden_file.h"
#include "hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/block_tensors.h"
#include "model/config.h"
#include "model/loader.h"
#include "model/rope_table.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/deepseek_v3/";
const char* const kCases[] = {"deepseek_v3", "no_q_lora"};

TEST(DeepseekConfig, ParsesLatentAttentionAndRouting) {
  const ModelConfig c = load_model_config(kDir + "deepseek_v3/model/config.json");
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.mla.q_lora_rank, 24);
  EXPECT_EQ(c.mla.kv_lora_rank, 16);
  EXPECT_EQ(c.rope_dims(), 4);
  EXPECT_TRUE(c.mla.rope_interleave);
  EXPECT_EQ(c.moe.routing, Routing::SigmoidGroups);
  EXPECT_EQ(c.moe.n_group, 4);
  EXPECT_EQ(c.moe.topk_group, 2);
  EXPECT_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.moe.shared_intermediate, 16);
  EXPECT_FALSE(c.is_moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(c.is_moe_layer(1));
  const BlockDims d = c.block_dims(1);
  EXPECT_EQ(d.attn, AttnKind::Mla);
  EXPECT_EQ(d.D, 12);
  EXPECT_EQ(d.attn_linears(), 5u);
  // transformers: qk_head_dim^-0.5 * (0.1 * mscale_all_dim * ln(factor) + 1)^2
  const double m = 0.1 * std::log(4.0) + 1;
  EXPECT_DOUBLE_EQ(d.mla.scale, m * m / std::sqrt(12.0));
  EXPECT_EQ(rope_attention_factor(c.rope_scaling), 1.0);  // mscale / mscale_all_dim, both 1
  const ModelConfig v2 = load_model_config(kDir + "no_q_lora/model/config.json");
  EXPECT_EQ(v2.mla.q_lora_rank, 0);
  EXPECT_EQ(v2.block_dims(0).attn_linears(), 4u);
  EXPECT_EQ(v2.moe.shared_intermediate, 32);  // two shared experts
  EXPECT_DOUBLE_EQ(v2.block_dims(0).mla.scale, 1 / std::sqrt(12.0));  // no YaRN
}

// YaRN's blended frequencies, cos/sin factor and DeepSeek's softmax scale against transformers'
// (tests/data/yarn, made by tools/make_yarn_goldens.py). transformers blends in fp32: 1e-6 relative.
TEST(DeepseekConfig, YarnMatchesTransformers) {
  std::ifstream f(std::string(AR_SOURCE_DIR) + "/tests/data/yarn/expected.json");
  const json all = json::parse(f);
  for (const auto& [name, c] : all.items()) {
    json j = read_config(kDir + "deepseek_v3/model");
    j["rope_parameters"] = c["rope_parameters"];
    j["qk_rope_head_dim"] = c["rope_dims"];
    j["qk_nope_head_dim"] = c["qk_head_dim"].get<int64_t>() - c["rope_dims"].get<int64_t>();
    j["head_dim"] = c["rope_dims"];
    j["max_position_embeddings"] = 163840;
    const ModelConfig cfg = parse_model_config(j, name);
    const auto inv = rope_inv_freq(cfg.rope_dims(), cfg.rope_theta, cfg.rope_scaling);
    const auto want = c["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(inv.size(), want.size()) << name;
    for (size_t i = 0; i < inv.size(); ++i) EXPECT_NEAR(inv[i], want[i], 1e-6 * want[i]) << name << " " << i;
    EXPECT_NEAR(rope_attention_factor(cfg.rope_scaling), c["attention_factor"].get<double>(), 1e-12) << name;
    EXPECT_NEAR(cfg.attention_scale(), c["softmax_scale"].get<double>(), 1e-12) << name;
  }
}

TEST(DeepseekConfig, RefusesWhatItCannotRunNamingTheField) {
  struct Row {
    const char* field;
    json value;
    const char* expect;
  };
  const Row rows[] = {
      {"n_group", 3, "n_group: does not divide n_routed_experts 8"},
      {"topk_group", 5, "topk_group: exceeds n_group 4"},
      {"qk_rope_head_dim", 5, "must be even"},
      {"v_head_dim", 13, "v_head_dim: exceeds"},
      {"attention_bias", true, "attention_bias"},
      {"scoring_func", "softmax", "scoring_func"},
      {"first_k_dense_replace", 4, "first_k_dense_replace"},
      {"num_key_value_heads", 2, "num_key_value_heads"},
  };
  for (const Row& r : rows) {
    json j = read_config(kDir + "deepseek_v3/model");
    j[r.field] = r.value;
    const std::string err = error_of([&] { parse_model_config(j, "cfg.json"); });
    EXPECT_NE(err.find(r.expect), std::string::npos) << r.field << ": " << err;
  }
}

// One table names every tensor of a layer: the MLA attention, the router's correction bias as a buffer,
// the ungated shared experts, the router kept in 16 bit.
TEST(DeepseekModel, TheLayerTableNamesEveryTensor) {
  const ModelConfig c = load_model_config(kDir + "deepseek_v3/model/config.json");
  std::vector<std::string> linears, other;
  for (const BlockTensor& t : block_tensors(c, 1, false))
    (t.role == TensorRole::Linear ? linears : other).push_back(t.name);
  ASSERT_EQ(linears.size(), 5u + 3 * 8 + 3);
  EXPECT_EQ(linears[0], "self_attn.q_a_proj.weight");
  EXPECT_EQ(linears[2], "self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(linears[4], "self_attn.o_proj.weight");
  EXPECT_EQ(linears[5], "mlp.experts.0.gate_proj.weight");
  EXPECT_EQ(linears.back(), "mlp.shared_experts.down_proj.weight");
  const std::vector<std::string> want = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                         "self_attn.q_a_layernorm.weight", "self_attn.kv_a_layernorm.weight",
                                         "mlp.gate.e_score_correction_bias", "mlp.gate.weight"};
  EXPECT_EQ(other, want);
}

// Both layouts load to the same weights, so their logits are identical, and both match transformers'.
TEST(DeepseekModel, LogitsMatchTransformersInBothLayouts) {
  for (const char* c : kCases) expect_logits_match_transformers(kDir + c, c);
}

// Incremental decoding through latent attention gives the logits of the whole-sequence forward.
TEST(DeepseekModel, DecodeMatchesForward) {
  auto m = HfModel::open(kDir + "deepseek_v3/model");
  Context ctx(Device{}, 2);
  Transformer tf(*m, ctx, true);
  const std::vector<int32_t> ids = {5, 17, 33, 8, 41, 12};
  Tensor full = tf.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
  const int64_t V = m->config().vocab_size;
  std::vector<float> last;
  for (size_t i = 0; i < ids.size(); i += 2) last = tf.decode(ids.data() + i, 2);
  EXPECT_LT(rel_err(last.data(), full.f32() + (int64_t(ids.size()) - 1) * V, size_t(V)), 1e-5);
}

}  // namespace
