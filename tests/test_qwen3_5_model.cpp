// Qwen3.5 (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, the multimodal Qwen3_5MoeForConditionalGeneration's
// language model) on the inference path: config.json parsing (the split projections, mRoPE's sections read
// as plain RoPE for text, Qwen3.5-MoE's every-layer experts), the linear layers' table, and the logits of
// tiny random checkpoints against transformers' (tests/data/qwen3_5, made by tools/make_qwen3_5_goldens.py:
// the exact model's, as for Qwen3-Next), the multimodal one's text logits equal to the text model's;
// incremental decoding.
#include "hf_checkpoint.h"
#include "model/block_tensors.h"
#include "model/config.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/qwen3_5/";

TEST(Qwen3_5Config, ReadsTheSplitLinearLayersAndBothFamilies) {
  const ModelConfig d = load_model_config(kDir + "dense/model/config.json");
  EXPECT_EQ(d.delta_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_TRUE(d.delta.split && d.attn_out_gate && d.qk_norm && d.norm_unit_offset);
  EXPECT_EQ(d.rotary_dims, 4);
  EXPECT_FALSE(d.is_moe());
  EXPECT_EQ(d.block_dims(0).attn_linears(), 3u);
  const ModelConfig m = load_model_config(kDir + "moe/model/config.json");
  EXPECT_TRUE(m.is_moe_layer(0) && m.is_moe_layer(1) && m.moe.norm_topk_prob && m.moe.shared_gate);
  EXPECT_EQ(m.moe.shared_intermediate, 24);
  // transformers' Qwen3_5Moe reads no decoder_sparse_step, mlp_only_layers or norm_topk_prob: neither do we.
  json j = read_config(kDir + "moe/model");
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {0};
  j["norm_topk_prob"] = false;
  const ModelConfig m2 = parse_model_config(j, "cfg.json");
  EXPECT_TRUE(m2.is_moe_layer(0) && m2.is_moe_layer(1) && m2.moe.norm_topk_prob);
  const ModelConfig mm = load_model_config(kDir + "multimodal/model/config.json");
  EXPECT_TRUE(mm.multimodal && mm.delta.split && mm.is_moe());
}

TEST(Qwen3_5Model, TheLinearLayerTableSplitsTheProjections) {
  const ModelConfig c = load_model_config(kDir + "dense/model/config.json");
  std::vector<std::string> linears, kept;
  for (const BlockTensor& t : block_tensors(c, 0, false)) {
    if (t.role == TensorRole::Linear) linears.push_back(t.name);
    if (t.role == TensorRole::Kept) kept.push_back(t.name);
    if (t.name == "linear_attn.in_proj_qkv.weight") {
      EXPECT_EQ(t.shape, (Shape{2 * 8 + 2 * 8 + 4 * 6, 32}));
    }
  }
  EXPECT_EQ(linears, (std::vector<std::string>{"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
                                               "linear_attn.out_proj.weight", "mlp.gate_proj.weight",
                                               "mlp.up_proj.weight", "mlp.down_proj.weight"}));
  EXPECT_EQ(kept, (std::vector<std::string>{"linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"}));
}

TEST(Qwen3_5Model, LogitsMatchTransformers) {
  std::vector<float> text;
  for (const char* c : {"dense", "moe", "multimodal"}) {
    const auto ours = expect_matches_exact_golden(kDir + c, c);
    if (std::string(c) == "moe") text = ours;
    if (std::string(c) == "multimodal") {
      EXPECT_TRUE(ours == text) << "the multimodal checkpoint's text logits differ";
    }
  }
}

TEST(Qwen3_5Model, DecodeMatchesForward) {
  for (const char* c : {"dense", "multimodal"}) expect_decode_matches_forward(kDir + c + "/model");
}

}  // namespace
