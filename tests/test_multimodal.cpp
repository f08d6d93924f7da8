// The language model of a multimodal checkpoint (Gemma3ForConditionalGeneration): NameMap's spellings
// (model/name_map.h) in both stored layouts, config.json's text_config with Gemma3TextConfig's defaults,
// the refusals (no text_config, both layouts, a vision tensor under a text-model name, a soft-cap that
// transformers and vLLM apply differently), and the text logits of a tiny random checkpoint against
// transformers' in both layouts (tests/data/gemma3/multimodal, made by tools/make_gemma3_goldens.py).
#include "hf_checkpoint.h"
#include "model/config.h"
#include "model/name_map.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/gemma3/multimodal";

// The checkpoint at `from` with its tensor names passed through `rename` (empty: dropped) and `extra` added.
void write_renamed(const std::string& from, const std::string& to, const std::function<std::string(const std::string&)>& rename,
                   const std::vector<std::string>& extra = {}) {
  bool added = false;
  rewrite_checkpoint(from, to, [&](Context& ctx, const StTensorInfo& t, const uint8_t* src, std::vector<StEntry>& out) {
    if (const std::string name = rename(t.name); !name.empty()) out.push_back(stored_copy(ctx, t, src, name));
    if (added) return;
    added = true;
    for (const std::string& name : extra) out.push_back({name, Tensor::zeros({4}, DType::F32, ctx)});
  });
}

template <class F>
void expect_error_contains(F&& f, const std::string& want) {
  const std::string err = error_of(f);
  EXPECT_NE(err.find(want), std::string::npos) << "got: " << err;
}

TEST(NameMap, TextOnlyCheckpointsKeepEveryName) {
  const NameMap plain;
  EXPECT_FALSE(plain.multimodal());
  for (const char* n : {"model.layers.0.mlp.up_proj.weight", "lm_head.weight", "vision_tower.x"}) {
    EXPECT_EQ(plain.stored(n), n);
    EXPECT_EQ(plain.module(n), n);
    EXPECT_EQ(plain.text_name(n), std::optional<std::string>(n));
    EXPECT_EQ(plain.from_user(n), n);
  }
}

TEST(NameMap, ReleasedLayout) {
  const NameMap m = NameMap::detect({"language_model.model.embed_tokens.weight", "language_model.model.layers.0.x.weight",
                                     "vision_tower.encoder.layers.0.fc1.weight", "multi_modal_projector.w"},
                                    "ckpt");
  ASSERT_TRUE(m.multimodal());
  EXPECT_EQ(m.stored("model.layers.3.mlp.up_proj.weight"), "language_model.model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(m.stored("lm_head.weight"), "language_model.lm_head.weight");
  EXPECT_EQ(m.stored("vision_tower.encoder.layers.0.fc1.weight"), "vision_tower.encoder.layers.0.fc1.weight");
  EXPECT_EQ(m.module("model.layers.3.mlp.up_proj"), "model.language_model.layers.3.mlp.up_proj");
  EXPECT_EQ(m.module("lm_head"), "lm_head");
  EXPECT_EQ(m.text_name("language_model.model.norm.weight"), std::optional<std::string>("model.norm.weight"));
  EXPECT_EQ(m.text_name("language_model.lm_head.weight"), std::optional<std::string>("lm_head.weight"));
  EXPECT_EQ(m.text_name("vision_tower.encoder.layers.0.fc1.weight"), std::nullopt);
  // A user's names in either spelling, with or without the trailing part, read as text-model names.
  EXPECT_EQ(m.from_user("language_model.model.layers.0.mlp"), "model.layers.0.mlp");
  EXPECT_EQ(m.from_user("model.language_model.layers.0.mlp.down_proj"), "model.layers.0.mlp.down_proj");
  EXPECT_EQ(m.from_user("language_model.lm_head"), "lm_head");
  EXPECT_EQ(m.from_user("mlp.down_proj"), "mlp.down_proj");
}

TEST(NameMap, TransformersModuleLayout) {
  const NameMap m = NameMap::detect({"model.language_model.layers.0.x.weight", "model.vision_tower.a.weight",
                                     "lm_head.weight"}, "ckpt");
  EXPECT_EQ(m.stored("model.layers.0.x.weight"), "model.language_model.layers.0.x.weight");
  EXPECT_EQ(m.stored("lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(m.stored("model.vision_tower.a.weight"), "model.vision_tower.a.weight");  // not a text-model name
  EXPECT_EQ(m.text_name("lm_head.weight"), std::optional<std::string>("lm_head.weight"));
  EXPECT_EQ(m.text_name("model.vision_tower.a.weight"), std::nullopt);
}

TEST(NameMap, RefusesAmbiguousLayouts) {
  expect_error_contains([] { NameMap::detect({"model.layers.0.x", "vision_tower.y"}, "ckpt"); },
                        "ckpt: no tensor under language_model.model. or model.language_model.");
  expect_error_contains(
      [] { NameMap::detect({"language_model.model.layers.0.x", "model.language_model.layers.0.x"}, "ckpt"); },
      "tensors under both");
  expect_error_contains([] { NameMap::detect({"language_model.model.layers.0.x", "model.layers.0.x"}, "ckpt"); },
                        "tensor 'model.layers.0.x' is outside the language model");
}

TEST(MultimodalConfig, TheLanguageModelComesFromTextConfig) {
  const ModelConfig c = load_model_config(kDir + "/model/config.json");
  EXPECT_EQ(c.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_TRUE(c.multimodal);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_TRUE(c.tie_word_embeddings && c.sandwich_norms && c.norm_unit_offset);
  EXPECT_EQ(c.final_logit_softcap, 0);
  // A released config's text_config lists few fields: Gemma3TextConfig's defaults fill the rest
  // (gemma-3-4b-it's text_config, abridged).
  const json released = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                         {"text_config", {{"hidden_size", 2560}, {"intermediate_size", 10240}, {"num_hidden_layers", 34},
                                          {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                                          {"sliding_window", 1024}, {"model_type", "gemma3_text"}}},
                         {"vision_config", {{"hidden_size", 1152}}}};
  const ModelConfig d = parse_model_config(released, "config.json");
  EXPECT_EQ(d.vocab_size, 262208);
  EXPECT_EQ(d.num_heads, 8);
  EXPECT_EQ(d.num_kv_heads, 4);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.sliding_window, 1024);
  EXPECT_EQ(d.rope_scaling.factor, 8.0);
  EXPECT_EQ(d.sliding_layers[5], 0);  // every 6th layer global
  EXPECT_EQ(d.bos_token_id, 2);
}

TEST(MultimodalConfig, RefusesNamingTheField) {
  json j = read_config(kDir + "/model");
  json no_text = j;
  no_text.erase("text_config");
  expect_error_contains([&] { parse_model_config(no_text, "c.json"); }, "c.json: field 'text_config'");
  json capped = j;
  capped["text_config"]["final_logit_softcapping"] = 30.0;
  expect_error_contains([&] { parse_model_config(capped, "c.json"); },
                        "c.json text_config: field 'final_logit_softcapping'");
  json bad = j;
  bad["text_config"]["hidden_activation"] = "relu";
  expect_error_contains([&] { parse_model_config(bad, "c.json"); }, "c.json text_config: hidden_activation: 'relu' is not supported");
}

TEST(MultimodalModel, TextLogitsMatchTransformersInBothLayouts) {
  const auto ours = expect_matches_golden(kDir, kDir + "/model", "multimodal");
  const GoldenIds g = golden_ids(kDir);
  EXPECT_TRUE(logits_of(kDir + "/model_v5", g.ids, g.B, g.T) == ours);
  auto m = HfModel::open(kDir + "/model");
  EXPECT_TRUE(m->names().multimodal());
  EXPECT_TRUE(m->has("model.layers.2.mlp.down_proj.weight"));
  EXPECT_FALSE(m->has("language_model.model.layers.2.mlp.down_proj.weight"));
  const std::vector<std::string>& foreign = m->foreign_names();
  EXPECT_TRUE(std::find(foreign.begin(), foreign.end(), "multi_modal_projector.mm_input_projection_weight") != foreign.end());
  EXPECT_TRUE(std::all_of(foreign.begin(), foreign.end(), [](const std::string& n) {
    return n.starts_with("vision_tower.") || n.starts_with("multi_modal_projector.");
  }));
  EXPECT_EQ(HfModel::open(kDir + "/model_v5")->foreign_names().front().rfind("model.", 0), 0u);
}

// Messages name the tensors as stored; a lying checkpoint is refused as a text one is.
TEST(MultimodalModel, RefusesBadCheckpointsNamingStoredTensors) {
  TempDir d("mm_bad");
  write_renamed(kDir + "/model", d.path, [](const std::string& n) {
    return n == "language_model.model.layers.1.mlp.up_proj.weight" ? std::string() : n;
  });
  expect_error_contains([&] { HfModel::open(d.path); }, "tensor 'language_model.model.layers.1.mlp.up_proj.weight' is missing");
  TempDir e("mm_mixed");
  write_renamed(kDir + "/model", e.path, [](const std::string& n) { return n; }, {"model.norm.weight"});
  expect_error_contains([&] { HfModel::open(e.path); }, "tensor 'model.norm.weight' is outside the language model");
}

}  // namespace
