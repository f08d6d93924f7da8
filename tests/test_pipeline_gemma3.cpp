// Gemma 3 on the quantization paths beyond the families test (test_pipeline_families.cpp: RTN read back,
// SignRound vs RTN, worlds): the float schemes (MXFP4 as auto_round and llm_compressor, FP8_STATIC's input
// scales) with finite KL near the FP model, --layer_config formats in the outputs, and a resumed run after a
// kill writing the uninterrupted run's bytes. Windows of 16 keys on 64-token samples, sandwich norms stored
// as w (1 + w only inside the engine), tied embeddings.
#include <cmath>
#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "fp_schemes.h"
#include "io/atomic_file.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "pipeline/quantize.h"
#include "quant/signround.h"
#include "quantize_options.h"
#include "resume_check.h"
#include "model_compare.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;

namespace {

using test::kl_to;

TEST(PipelineGemma3, FloatSchemes) {
  test::TempDir m("g3fp_m"), q("g3fp_q"), s("g3fp_s");
  write_synthetic_model(m.path, tiny_gemma3_config(2), 71, DType::BF16);
  auto o = test::moe_quantize_options(m.path, q.path, 3);
  o.fmt = test::kFpSchemes[0].fmt;  // MXFP4
  o.format = "auto_round,llm_compressor";
  quantize_model(o);
  test::expect_same_linears(q.path + "/auto-round", q.path + "/llm-compressor", 2, 7u);
  const auto t = test::tensor_bytes(q.path + "/llm-compressor/model.safetensors");
  EXPECT_TRUE(t.count("model.layers.1.mlp.down_proj.weight_packed"));
  EXPECT_TRUE(t.count("model.layers.1.post_feedforward_layernorm.weight"));
  o = test::moe_quantize_options(m.path, s.path, 0);
  o.fmt = test::fp8_static_format();
  o.format = "llm_compressor";
  quantize_model(o);
  EXPECT_TRUE(test::tensor_bytes(s.path + "/model.safetensors").count("model.layers.0.mlp.up_proj.input_scale"));
  for (const std::string& dir : {q.path + "/auto-round", s.path}) {
    const double kl = kl_to(m.path, dir);
    EXPECT_TRUE(std::isfinite(kl) && kl < 0.5) << dir << ": KL " << kl;
  }
}

// --layer_config's formats reach the outputs; a run killed after block one and resumed writes the
// uninterrupted run's bytes.
TEST(PipelineGemma3, LayerConfigAndResume) {
  const std::string m = test::temp_path("g3lc_m"), ref = test::temp_path("g3lc_ref"), q = test::temp_path("g3lc_q");
  write_synthetic_model(m, tiny_gemma3_config(4), 72);
  QuantizeOptions o = test::small_quantize_options(m, ref, 10);
  o.format = "auto_round,auto_gptq";
  o.overwrite = true;
  o.layer_config = LayerConfig::parse("{q_proj: {bits: 8}, down_proj: {bits: 2, group_size: 64}}");
  test::expect_resume_matches_uninterrupted(o, q, 4, {"/auto-round", "/auto-gptq"});
  const json extra = json::parse(read_text_file(q + "/auto-round/config.json"))["quantization_config"]["extra_config"];
  EXPECT_EQ(extra["model.layers.2.self_attn.q_proj"]["bits"], 8) << extra.dump();
  EXPECT_EQ(extra["model.layers.3.mlp.down_proj"]["group_size"], 64) << extra.dump();
  const double kl = kl_to(m, q + "/auto-round");
  EXPECT_TRUE(std::isfinite(kl) && kl < 0.5) << kl;
  for (const auto& d : {m, ref, q}) std::filesystem::remove_all(d);
}

}  // namespace
