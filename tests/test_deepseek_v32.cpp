// DeepSeek-V3.2 (model/arch/deepseek_v32.cpp): V3's model plus the sparse-attention indexer, run where
// the indexer selects every token (sequences up to index_topk): logits equal to transformers' on a tiny
// random checkpoint (tests/data/deepseek_v32, tools/make_sigmoid_moe_goldens.py) in both expert layouts;
// the indexer's tensors in the layer table (Linears kept in 16 bit, its LayerNorm copied); longer
// sequences refused for inference and calibration, naming index_topk; config refusals.
#include <nlohmann/json.hpp>

#include "hf_checkpoint.h"
#include "io/json_file.h"
#include "model/block_tensors.h"
#include "model/config.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "pipeline/quantize.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/deepseek_v32/deepseek_v32";

TEST(DeepseekV32, LogitsMatchTransformersInBothLayouts) {
  const ModelConfig c = load_model_config(kDir + "/model/config.json");
  EXPECT_EQ(c.dense_limit, 16);
  EXPECT_EQ(c.dense_limit_field, "index_topk");
  EXPECT_EQ(c.mla.indexer_heads, 2);
  EXPECT_TRUE(c.mla.rope_interleave);
  expect_logits_match_transformers(kDir, "v32");
}

TEST(DeepseekV32, TheLayerTableCarriesTheIndexer) {
  const ModelConfig c = load_model_config(kDir + "/model/config.json");
  std::vector<std::string> kept, buffers;
  for (const BlockTensor& t : block_tensors(c, 1, false)) {
    if (t.name.find(".indexer.") == std::string::npos) continue;
    (t.role == TensorRole::Kept ? kept : buffers).push_back(t.name + " " + shape_str(t.shape));
    EXPECT_TRUE(t.role == TensorRole::Kept || t.role == TensorRole::Buffer) << t.name;
  }
  EXPECT_EQ(kept, (std::vector<std::string>{"self_attn.indexer.wq_b.weight [16, 24]",
                                            "self_attn.indexer.wk.weight [8, 32]",
                                            "self_attn.indexer.weights_proj.weight [2, 32]"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"self_attn.indexer.k_norm.weight [8]", "self_attn.indexer.k_norm.bias [8]"}));
}

TEST(DeepseekV32, SequencesBeyondIndexTopkAreRefused) {
  auto m = HfModel::open(kDir + "/model");
  Context ctx(Device{}, 2);
  Transformer tf(*m, ctx, true);
  std::vector<int32_t> ids(17, 5);
  const std::string e = error_of([&] { tf.forward_logits(ids.data(), nullptr, 1, 17); });
  EXPECT_NE(e.find("sequence of 17 tokens exceeds index_topk 16 of DeepseekV32ForCausalLM"), std::string::npos) << e;
  EXPECT_NO_THROW(tf.forward_logits(ids.data(), nullptr, 1, 16));
  EXPECT_NE(error_of([&] { tf.decode(ids.data(), 17); }).find("exceeds index_topk 16"), std::string::npos);
  EXPECT_NE(error_of([&] { require_context(*m, 20, "eval"); }).find("eval of 20 tokens exceeds index_topk 16"),
            std::string::npos);
}

// Quantized: the indexer copied bit for bit and listed as 16 bit; an explicit --seqlen past index_topk is
// refused before any work, the default one clamped to it with a note.
TEST(DeepseekV32, QuantizesWithTheIndexerKeptAndRefusesLongCalibration) {
  TempDir m("v32_m"), q("v32_q");
  json c = tiny_moe_config("deepseek_v32", 2);
  c["index_topk"] = 24;
  write_synthetic_model(m.path, c, 71, DType::BF16);
  auto o = moe_quantize_options(m.path, q.path, 2);  // seqlen 32 > 24, given explicitly
  o.calib.seqlen_given = true;
  const std::string e = error_of([&] { quantize_model(o); });
  EXPECT_NE(e.find("--seqlen of 32 tokens exceeds index_topk 24"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(q.path + "/config.json"));
  o.calib.seqlen_given = false;  // a default: clamped
  const QuantizeReport rep = quantize_model(o);
  EXPECT_TRUE(any_contains(rep.notes, "clamped to the model's context of 24 tokens (index_topk")) << rep.notes.size();
  const auto sb = tensor_bytes(m.path + "/model.safetensors"), qb = tensor_bytes(q.path + "/model.safetensors");
  const json qc = read_json_file(q.path + "/config.json")["quantization_config"];
  int carried = 0;
  for (const auto& [name, bytes] : sb) {
    if (name.find(".indexer.") == std::string::npos) continue;
    EXPECT_TRUE(qb.count(name) && qb.at(name) == bytes) << name;
    if (name.ends_with("proj.weight") || name.ends_with("wq_b.weight") || name.ends_with("wk.weight")) {
      EXPECT_EQ(qc["extra_config"][name.substr(0, name.size() - 7)]["bits"], 16) << name;
    }
    ++carried;
  }
  EXPECT_EQ(carried, 2 * 5);
}

TEST(DeepseekV32, RefusesWhatItCannotRunNamingTheField) {
  const json base = read_config(kDir + "/model");
  json j = base;
  j["q_lora_rank"] = nullptr;
  EXPECT_NE(error_of([&] { parse_model_config(j, "cfg.json"); }).find("q_lora_rank: is required"), std::string::npos);
  j = base;
  j["mlp_layer_types"] = {"dense", "dense", "sparse"};
  EXPECT_NE(error_of([&] { parse_model_config(j, "cfg.json"); }).find("mlp_layer_types"), std::string::npos);
  j["mlp_layer_types"] = {"dense", "sparse", "sparse"};
  EXPECT_NO_THROW(parse_model_config(j, "cfg.json"));
  j = base;
  j["index_topk"] = 0;
  EXPECT_NE(error_of([&] { parse_model_config(j, "cfg.json"); }).find("index_topk"), std::string::npos);
}

}  // namespace
