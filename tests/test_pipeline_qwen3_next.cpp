// Qwen3-Next on the quantization paths beyond the families test (test_pipeline_families.cpp: RTN read back,
// SignRound vs RTN, worlds): --layer_config formats on the Gated DeltaNet and gated-attention Linears, a
// resumed run after a kill writing the uninterrupted run's bytes, the MTP layers (mtp.*) copied unchanged
// into every output and kept out of every quantization_config's quantized modules, the float schemes
// (MXFP4 as auto_round and llm_compressor, FP8_STATIC's input scales) with finite KL near the FP model;
// Qwen3.5-MoE inside its multimodal class. GGUF: test_gguf_delta_net.cpp.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "fp_schemes.h"
#include "hf_checkpoint.h"
#include "multimodal_checkpoint.h"
#include "io/atomic_file.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "pipeline/quantize.h"
#include "quantize_options.h"
#include "resume_check.h"
#include "model_compare.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;

namespace {

using test::kl_to;

TEST(PipelineQwen3Next, LayerConfigResumeAndMtpLayers) {
  const std::string m = test::temp_path("qnlc_m"), ref = test::temp_path("qnlc_ref"), q = test::temp_path("qnlc_q");
  write_synthetic_model(m, tiny_qwen3_next_config(4), 81);
  test::append_layer_copy_as(m, 3, "mtp.layers.0.");
  QuantizeOptions o = test::small_quantize_options(m, ref, 10);
  o.format = "auto_round,auto_gptq";
  o.overwrite = true;
  o.layer_config = LayerConfig::parse("{in_proj_qkvz: {bits: 8}, q_proj: {bits: 8}, down_proj: {bits: 2, group_size: 64}}");
  test::expect_resume_matches_uninterrupted(o, q, 4, {"/auto-round", "/auto-gptq"});
  o = test::small_quantize_options(m, q + "/auto-awq", 0);  // AWQ's layout holds no per-layer format
  o.format = "auto_awq";
  quantize_model(o);
  const json qc = json::parse(read_text_file(q + "/auto-round/config.json"))["quantization_config"];
  const json& extra = qc["extra_config"];
  EXPECT_EQ(extra["model.layers.2.linear_attn.in_proj_qkvz"]["bits"], 8) << extra.dump();
  EXPECT_EQ(extra["model.layers.1.self_attn.q_proj"]["bits"], 8) << extra.dump();
  EXPECT_EQ(extra["model.layers.3.mlp.shared_expert.down_proj"]["group_size"], 64) << extra.dump();
  EXPECT_EQ(extra["model.layers.0.linear_attn.in_proj_ba"], json({{"bits", 16}, {"data_type", "fp"}})) << extra.dump();
  const auto src = test::tensor_bytes(m + "/model.safetensors");
  for (const char* sub : {"/auto-round", "/auto-gptq", "/auto-awq"}) {
    const auto out = test::tensor_bytes(q + sub + "/model.safetensors");
    size_t mtp = 0;
    for (const auto& [name, bytes] : src)
      if (name.rfind("mtp.", 0) == 0) {
        ++mtp;
        ASSERT_TRUE(out.count(name)) << sub << ": " << name << " not copied";
        if (std::string(sub) == "/auto-round") {  // the GPTQ and AWQ outputs are fp16 throughout
          EXPECT_TRUE(out.at(name) == bytes) << sub << ": " << name << " not copied as stored";
        }
      }
    EXPECT_GT(mtp, 10u);
  }
  const json gq = json::parse(read_text_file(q + "/auto-gptq/config.json"))["quantization_config"];
  EXPECT_TRUE(gq["dynamic"].contains("-:.*mtp\\..*")) << gq.dump();
  const json aq = json::parse(read_text_file(q + "/auto-awq/config.json"))["quantization_config"];
  EXPECT_NE(aq["modules_to_not_convert"].dump().find("\"mtp\""), std::string::npos) << aq.dump();
  const double kl = kl_to(m, q + "/auto-round");
  EXPECT_TRUE(std::isfinite(kl) && kl < 0.5) << kl;
  for (const auto& d : {m, ref, q}) std::filesystem::remove_all(d);
}

TEST(PipelineQwen3Next, FloatSchemes) {
  test::TempDir m("qnfp_m"), q("qnfp_q"), s("qnfp_s");
  write_synthetic_model(m.path, tiny_qwen3_next_config(2), 82, DType::BF16);
  auto o = test::moe_quantize_options(m.path, q.path, 3);
  o.fmt = test::kFpSchemes[0].fmt;  // MXFP4
  o.format = "auto_round,llm_compressor";
  quantize_model(o);
  const auto t = test::tensor_bytes(q.path + "/llm-compressor/model.safetensors");
  EXPECT_TRUE(t.count("model.layers.0.linear_attn.in_proj_qkvz.weight_packed"));
  EXPECT_TRUE(t.count("model.layers.0.linear_attn.in_proj_ba.weight"));
  EXPECT_TRUE(t.count("model.layers.1.self_attn.q_proj.weight_packed"));
  o = test::moe_quantize_options(m.path, s.path, 0);
  o.fmt = test::fp8_static_format();
  o.format = "llm_compressor";
  quantize_model(o);
  const auto st = test::tensor_bytes(s.path + "/model.safetensors");
  EXPECT_TRUE(st.count("model.layers.0.linear_attn.out_proj.input_scale"));
  EXPECT_TRUE(st.count("model.layers.1.self_attn.q_proj.input_scale"));
  for (const std::string& dir : {q.path + "/auto-round", s.path}) {
    const double kl = kl_to(m.path, dir);
    EXPECT_TRUE(std::isfinite(kl) && kl < 0.5) << dir << ": KL " << kl;
  }
}

// Qwen3.5-MoE (the split projections) inside Qwen3_5MoeForConditionalGeneration: the language model tuned
// as the text-only twin is (the same bytes under model.language_model.*, lm_head.* as stored), the vision
// tensors (model.visual.*) copied, quantization_config naming transformers' modules; the read-back logits
// equal the text-only output's.
TEST(PipelineQwen3Next, Qwen3_5MultimodalTunesTheLanguageModelAndCopiesTheRest) {
  test::TempDir text("q35_text"), mm("q35_mm"), qt("q35_qt"), qm("q35_qm");
  write_synthetic_model(text.path, tiny_family_config("qwen3_5_moe", 2), 83, DType::BF16);
  test::write_qwen3_5_multimodal(text.path, mm.path);
  auto o = test::moe_quantize_options(text.path, qt.path, 3);
  o.format = "auto_round,auto_gptq";
  quantize_model(o);
  o.model_dir = mm.path;
  o.output_dir = qm.path;
  quantize_model(o);
  const auto input = test::tensor_bytes(mm.file("model.safetensors"));
  for (const char* sub : {"/auto-round", "/auto-gptq"}) {
    SCOPED_TRACE(sub);
    const auto ours = test::tensor_bytes(qm.path + sub + "/model.safetensors");
    const auto twin = test::tensor_bytes(qt.path + sub + "/model.safetensors");
    for (const auto& [name, bytes] : twin) {
      const std::string stored = name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name;
      ASSERT_TRUE(ours.count(stored)) << stored;
      EXPECT_TRUE(ours.at(stored) == bytes) << stored << ": not what the text-only run wrote";
    }
    for (const char* v : test::kQwen35VisionTensors) {
      ASSERT_TRUE(ours.count(v)) << v;
      if (std::string(sub) == "/auto-round") {
        EXPECT_TRUE(ours.at(v) == input.at(v)) << v << ": not copied unchanged";
      }
    }
    EXPECT_EQ(ours.size(), twin.size() + std::size(test::kQwen35VisionTensors));
    EXPECT_EQ(json::parse(read_text_file(qm.path + sub + "/config.json"))["architectures"][0],
              "Qwen3_5MoeForConditionalGeneration");
  }
  const json q = json::parse(read_text_file(qm.path + "/auto-round/config.json"))["quantization_config"];
  EXPECT_EQ(q["block_name_to_quantize"], "model.language_model.layers");
  EXPECT_EQ(q["extra_config"]["model.language_model.layers.0.linear_attn.in_proj_b"]["bits"], 16) << q.dump();
  const json g = json::parse(read_text_file(qm.path + "/auto-gptq/config.json"))["quantization_config"];
  EXPECT_TRUE(g["dynamic"].contains("-:.*visual\\..*")) << g.dump();
  test::expect_same_logits(qm.path + "/auto-round", qt.path + "/auto-round");
}

}  // namespace
