// gpt-oss (GptOssForCausalLM) end to end on the inference path: config.json parsing (layer types and the
// sliding window, sinks, the clamped SwiGLU's fields, YaRN without truncation, GptOssConfig's defaults)
// and refusals, the layer's tensor table in both expert layouts, and the logits of tiny random checkpoints
// against transformers' (tests/data/gpt_oss, made by tools/make_gpt_oss_goldens.py): transformers 5's
// fused experts and the per-expert layout AutoRound writes give the same logits, and the release's MXFP4
// experts are read exactly.
#include <functional>

#include "hf_checkpoint.h"
#include "model/block_tensors.h"
#include "model/config.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/gpt_oss/";

TEST(GptOssConfig, ParsesWindowsSinksAndTheClampedGate) {
  const ModelConfig c = load_model_config(kDir + "gpt_oss/model/config.json");
  EXPECT_EQ(c.sliding_window, 4);
  EXPECT_EQ(c.block_dims(0).window, 4);  // layer_types: sliding, full, sliding
  EXPECT_EQ(c.block_dims(1).window, 0);
  EXPECT_EQ(c.block_dims(2).window, 4);
  EXPECT_TRUE(c.block_dims(1).sinks);
  EXPECT_EQ(c.ffn_act, (GateAct{GateKind::ClampedSwiglu, 1.702f, 0.6f}));
  EXPECT_EQ(c.block_dims(1).act, c.ffn_act);
  EXPECT_TRUE(c.qkv_bias && c.o_bias);
  EXPECT_EQ(c.moe.routing, Routing::TopKSoftmax);
  EXPECT_TRUE(c.block_dims(0).moe.expert_bias);
  EXPECT_EQ(c.moe.expert_intermediate, 16);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.rope_theta, 150000);
  const ModelConfig t = load_model_config(kDir + "layer_types/model/config.json");
  EXPECT_EQ(t.block_dims(0).window, 0);
  EXPECT_EQ(t.block_dims(1).window, 4);
  EXPECT_FALSE(t.qkv_bias || t.o_bias);
  EXPECT_EQ(t.ffn_act.limit, 7.0f);
  // GptOssConfig's defaults: sliding layers 0, 2, ...; a 128-key window; YaRN x32 over 4096, theta 150000.
  json j = read_config(kDir + "gpt_oss/model");
  for (const char* k : {"layer_types", "sliding_window", "rope_parameters", "swiglu_limit", "swiglu_alpha"}) j.erase(k);
  const ModelConfig d = parse_model_config(j, "cfg.json");
  EXPECT_EQ(d.block_dims(0).window, 128);
  EXPECT_EQ(d.block_dims(1).window, 0);
  EXPECT_EQ(d.ffn_act, (GateAct{GateKind::ClampedSwiglu, 1.702f, 7.0f}));
  EXPECT_EQ(d.rope_theta, 150000);
  EXPECT_EQ(d.rope_scaling.type, "yarn");
  EXPECT_EQ(d.rope_scaling.factor, 32);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_FALSE(d.rope_scaling.truncate);
  j["sliding_window"] = nullptr;  // transformers: no window on any layer
  EXPECT_EQ(parse_model_config(j, "cfg.json").block_dims(0).window, 0);
}

TEST(GptOssConfig, RefusesWhatItCannotRunNamingTheField) {
  const std::pair<json, const char*> rows[] = {
      {json{{"layer_types", {"full_attention"}}}, "layer_types: 1 entries for num_hidden_layers 3"},
      {json{{"layer_types", {"full_attention", "chunked_attention", "full_attention"}}}, "chunked_attention"},
      {json{{"swiglu_limit", -1}}, "swiglu_limit"},
      {json{{"swiglu_alpha", 0}}, "swiglu_alpha"},
      {json{{"sliding_window", 0}}, "sliding_window"},
      {json{{"num_experts_per_tok", 9}}, "num_experts_per_tok"},
  };
  for (const auto& [patch, expect] : rows) {
    json j = read_config(kDir + "gpt_oss/model");
    j.update(patch);
    const std::string err = error_of([&] { parse_model_config(j, "cfg.json"); });
    EXPECT_NE(err.find(expect), std::string::npos) << patch.dump() << ": " << err;
  }
}

TEST(GptOssModel, TheLayerTableNamesEveryTensorInBothLayouts) {
  const ModelConfig c = load_model_config(kDir + "gpt_oss/model/config.json");
  for (bool fused : {false, true}) {
    std::vector<std::string> front, stored;
    size_t linears = 0;
    for (const BlockTensor& t : block_tensors(c, 1, fused)) {
      if (t.role == TensorRole::Linear) ++linears;
      else front.push_back(t.name);
      stored.push_back(t.stored);
    }
    EXPECT_EQ(linears, 4u + 3 * 4);
    ASSERT_EQ(front.size(), 2u + 4 + 1 + 2 + 3 * 4);
    EXPECT_EQ(front[6], "self_attn.sinks");
    EXPECT_EQ(front[7], "mlp.router.weight");  // no Linear: copied, neither quantized nor listed
    EXPECT_EQ(front[8], "mlp.router.bias");
    EXPECT_EQ(front[9], "mlp.experts.0.gate_proj.bias");
    EXPECT_EQ(front[11], "mlp.experts.0.down_proj.bias");
    if (fused) {
      EXPECT_EQ(stored[9], "model.layers.1.mlp.experts.gate_up_proj_bias");
    }
  }
}

// Both layouts load the same fp32 block, tensor by tensor (the fused gather against the per-expert copy).
TEST(GptOssModel, BothLayoutsLoadTheSameBlock) {
  auto fused = HfModel::open(kDir + "gpt_oss/model"), per = HfModel::open(kDir + "gpt_oss/per_expert");
  Context ctx;
  EXPECT_TRUE(fused->fused_experts(0));
  EXPECT_FALSE(per->fused_experts(0));
  const BlockWeights a = fused->load_block(1, ctx), b = per->load_block(1, ctx);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor &x = a.tensors[i].in(a), &y = b.tensors[i].in(b);
    ASSERT_EQ(x.numel(), y.numel()) << a.tensors[i].name;
    EXPECT_EQ(0, std::memcmp(x.f32(), y.f32(), size_t(x.numel()) * 4)) << a.tensors[i].name;
  }
}

TEST(GptOssModel, LogitsMatchTransformersInBothLayouts) {
  for (const char* c : {"gpt_oss", "layer_types", "mxfp4"}) {
    const std::string dir = kDir + c;
    const auto fused = expect_matches_golden(dir, dir + "/model", c);
    if (std::string(c) == "mxfp4") continue;  // one layout: the release's
    const GoldenIds g = golden_ids(dir);
    EXPECT_TRUE(logits_of(dir + "/per_expert", g.ids, g.B, g.T) == fused) << c << ": the layouts give different logits";
  }
}

// Incremental decoding through sinks and 4-key windows (the cache holds more keys than the window) gives
// the whole-sequence forward's logits at every position.
TEST(GptOssModel, DecodeMatchesForward) {
  expect_decode_matches_forward(kDir + "gpt_oss/model");
}

// The release's MXFP4 experts: read exactly (transformers' logits above, case mxfp4); a lying scale, a
// wrong block shape and MXFP4 on another family are refused naming the tensor or field.
TEST(GptOssModel, Mxfp4ExpertsAreCheckedAndRefusedByName) {
  const std::string src = kDir + "mxfp4/model";
  const ModelConfig c = load_model_config(src + "/config.json");
  EXPECT_TRUE(c.quant.mxfp4_experts);
  EXPECT_FALSE(c.quant.present);
  EXPECT_TRUE(HfModel::open(src)->fused_experts(1));
  const auto rewrite = [&](const std::string& to, const std::function<void(std::vector<StEntry>&)>& edit) {
    std::filesystem::create_directories(to);
    std::filesystem::copy_file(src + "/config.json", to + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    Context ctx;
    std::vector<StEntry> all;
    append_stored_except(*SafetensorsFile::open(src + "/model.safetensors"), {}, all, ctx);
    edit(all);
    write_safetensors(to + "/model.safetensors", all);
  };
  TempDir nan("oss_mxfp4_nan"), shape("oss_mxfp4_shape");
  rewrite(nan.path, [](std::vector<StEntry>& all) {
    for (auto& e : all)
      if (e.name == "model.layers.1.mlp.experts.down_proj_scales") e.tensor.data<uint8_t>()[5] = 0xFF;
  });
  Context ctx;
  const std::string err = error_of([&] { HfModel::open(nan.path)->load_block(1, ctx); });
  EXPECT_NE(err.find("model.layers.1.mlp.experts.down_proj_scales' holds 0xFF"), std::string::npos) << err;
  rewrite(shape.path, [&](std::vector<StEntry>& all) {
    for (auto& e : all)
      if (e.name == "model.layers.0.mlp.experts.gate_up_proj_scales")
        e.tensor = Tensor::empty({4, 64, 1, 1}, DType::U8, ctx);
  });
  const std::string bad = error_of([&] { HfModel::open(shape.path); });
  EXPECT_NE(bad.find("gate_up_proj_scales' is U8 [4, 64, 1, 1]; MXFP4 experts need U8 [4, 64, 2]"), std::string::npos)
      << bad;
  json j = read_config(kDir + "gpt_oss/model");
  j["quantization_config"] = {{"quant_method", "mxfp4"}};
  j["architectures"] = {"MixtralForCausalLM"};
  j["num_local_experts"] = 4;
  EXPECT_NE(error_of([&] { parse_model_config(j, "cfg.json"); }).find("'mxfp4' is read for gpt-oss's experts only"),
            std::string::npos);
}

}  // namespace
