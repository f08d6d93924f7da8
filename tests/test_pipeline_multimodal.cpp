// A multimodal checkpoint (Gemma3ForConditionalGeneration) through quantize: the language model tuned
// exactly as the same text-only checkpoint is (the same codes, under the checkpoint's own names), the
// vision tower and projector copied byte for byte into every output, quantization_config in transformers'
// module names (model.language_model.layers) with the vision modules left unconverted in each format,
// --layer_config / --fp_layers in the checkpoint's spellings, the processor files copied, and a resumed run
// in the other stored layout (model.language_model.*) writing the uninterrupted run's bytes, as the
// data-parallel lane does.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "fp_schemes.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "pipeline/quantize.h"
#include "quantize_options.h"
#include "resume_check.h"
#include "multimodal_checkpoint.h"
#include "model_compare.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;

namespace {

// The text model's name of a stored name, for comparing against the text-only run.
std::string text_name(const std::string& stored) {
  for (const char* p : {"language_model.model.", "model.language_model."})
    if (stored.rfind(p, 0) == 0) return "model." + stored.substr(std::string(p).size());
  return stored;
}

TEST(PipelineMultimodal, TunesTheLanguageModelAndCopiesTheRest) {
  test::TempDir text("mm_text"), mm("mm_model"), qt("mm_qt"), qm("mm_qm");
  write_synthetic_model(text.path, tiny_gemma3_config(2), 81, DType::BF16);
  test::write_multimodal(text.path, mm.path, /*v5=*/false);
  auto o = test::small_quantize_options(text.path, qt.path, 4);
  o.format = "auto_round,auto_gptq,fake";
  o.overwrite = true;
  o.layer_config = LayerConfig::parse("{\"language_model.model.layers.1.mlp.down_proj\": {\"bits\": 8}}");
  o.fp_layers = {"model.language_model.layers.0.self_attn.o_proj"};
  QuantizeOptions t = o;
  t.layer_config = LayerConfig::parse("{\"model.layers.1.mlp.down_proj\": {\"bits\": 8}}");
  t.fp_layers = {"model.layers.0.self_attn.o_proj"};
  quantize_model(t);
  o.model_dir = mm.path;
  o.output_dir = qm.path;
  quantize_model(o);
  const auto input = test::tensor_bytes(mm.file("model.safetensors"));
  for (const char* sub : {"/auto-round", "/auto-gptq", "/fake"}) {
    SCOPED_TRACE(sub);
    const auto ours = test::tensor_bytes(qm.path + sub + "/model.safetensors");
    const auto twin = test::tensor_bytes(qt.path + sub + "/model.safetensors");
    size_t text_tensors = 0;
    for (const auto& [name, bytes] : ours) {
      if (name.rfind("language_model.model.", 0) != 0) continue;
      ++text_tensors;
      ASSERT_TRUE(twin.count(text_name(name))) << name;
      EXPECT_TRUE(twin.at(text_name(name)) == bytes) << name << ": not what the text-only run wrote";
    }
    EXPECT_EQ(text_tensors, twin.size());
    for (const char* v : test::kVisionTensors) {
      ASSERT_TRUE(ours.count(v)) << v;
      if (std::string(sub) != "/auto-gptq") {  // fp16 throughout
        EXPECT_TRUE(ours.at(v) == input.at(v)) << v << ": not copied unchanged";
      }
    }
    EXPECT_EQ(ours.size(), text_tensors + std::size(test::kVisionTensors));
    EXPECT_EQ(read_text_file(qm.path + sub + "/preprocessor_config.json"), read_text_file(mm.file("preprocessor_config.json")));
    const json c = json::parse(read_text_file(qm.path + sub + "/config.json"));
    EXPECT_EQ(c["architectures"][0], "Gemma3ForConditionalGeneration");
    EXPECT_EQ(c["text_config"], json::parse(read_text_file(mm.file("config.json")))["text_config"]);
  }
  const json q = json::parse(read_text_file(qm.path + "/auto-round/config.json"))["quantization_config"];
  EXPECT_EQ(q["block_name_to_quantize"], "model.language_model.layers");
  EXPECT_EQ(q["extra_config"]["model.language_model.layers.1.mlp.down_proj"]["bits"], 8) << q.dump();
  EXPECT_EQ(q["extra_config"]["model.language_model.layers.0.self_attn.o_proj"]["bits"], 16) << q.dump();
  const json g = json::parse(read_text_file(qm.path + "/auto-gptq/config.json"))["quantization_config"];
  EXPECT_TRUE(g["dynamic"].contains("-:.*vision_tower\\..*")) << g.dump();
  EXPECT_TRUE(g["dynamic"].contains("-:.*multi_modal_projector\\..*")) << g.dump();
  EXPECT_TRUE(g["dynamic"].contains("-:model\\.language_model\\.layers\\.0\\.self_attn\\.o_proj")) << g.dump();
  EXPECT_EQ(g["block_name_to_quantize"], "model.language_model.layers");
  // Read back: the same logits as the text-only output's.
  test::expect_same_logits(qm.path + "/auto-round", qt.path + "/auto-round");
}

// transformers 5's module spelling in the files; MXFP4 in llm_compressor leaves the vision modules out.
TEST(PipelineMultimodal, ModuleLayoutFloatSchemeAndResume) {
  test::TempDir text("mm5_text"), mm("mm5_model"), fl("mm5_fl");
  write_synthetic_model(text.path, tiny_gemma3_config(4), 82, DType::BF16);
  test::write_multimodal(text.path, mm.path, /*v5=*/true);
  auto o = test::moe_quantize_options(mm.path, fl.path, 2);
  o.fmt = test::kFpSchemes[0].fmt;  // MXFP4
  o.format = "llm_compressor";
  quantize_model(o);
  const json ig = json::parse(read_text_file(fl.file("config.json")))["quantization_config"]["ignore"];
  EXPECT_EQ(ig, json({"lm_head", "re:.*multi_modal_projector\\..*", "re:.*vision_tower\\..*"})) << ig.dump();
  const auto t = test::tensor_bytes(fl.file("model.safetensors"));
  EXPECT_TRUE(t.count("model.language_model.layers.3.mlp.down_proj.weight_packed"));
  EXPECT_TRUE(t.count("model.vision_tower.post_layernorm.weight"));
  const std::string ref = test::temp_path("mm5_ref"), q = test::temp_path("mm5_q");
  QuantizeOptions r = test::small_quantize_options(mm.path, ref, 6);
  r.format = "auto_round";
  r.overwrite = true;
  test::expect_resume_matches_uninterrupted(r, q, 4, {""});
  EXPECT_TRUE(test::tensor_bytes(q + "/model.safetensors").count("model.language_model.layers.0.mlp.up_proj.qweight"));
  r.parallel = parallel::ParallelSetting::parse("2");  // the data-parallel lane writes the serial bytes
  r.devices = "cpu:0,cpu:1";
  quantize_model(r);
  EXPECT_TRUE(read_text_file(ref + "/model.safetensors") == read_text_file(q + "/model.safetensors"));
  for (const auto& d : {ref, q}) std::filesystem::remove_all(d);
}

}  // namespace
