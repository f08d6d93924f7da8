// Mixture-of-experts models end to end on the inference path: config.json parsing and refusals per
// architecture, both checkpoint layouts (per-expert tensors and transformers 5's fused expert tensors)
// validated at open, and the logits of tiny random Qwen3-MoE, Qwen2-MoE and Mixtral checkpoints against
// transformers' (tests/data/moe, made by tools/make_moe_goldens.py).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden_file.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/moe/";
const char* const kCases[] = {"qwen3_moe", "qwen2_moe", "mixtral"};

json read_config(const std::string& dir) {
  std::ifstream f(dir + "/config.json");
  return json::parse(f);
}

// A copy of a golden checkpoint in a fresh directory, for tests that break one of its files.
std::string copy_case(const std::string& c, const std::string& layout, const std::string& tag) {
  const std::string d = temp_path("moe_" + c + "_" + layout + "_" + tag);
  fs::remove_all(d);
  fs::copy(kDir + c + "/" + layout, d, fs::copy_options::recursive);
  return d;
}


// The tensors of a checkpoint directory's model.safetensors, copied into memory.
std::vector<StEntry> read_tensors(const std::string& dir) {
  Context ctx;
  std::vector<StEntry> out;
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  for (const auto& t : f->header().tensors) {
    StEntry e{t.name, Tensor::empty(t.shape, t.dtype, ctx)};
    std::memcpy(e.tensor.raw(), f->bytes(t), e.tensor.nbytes());
    out.push_back(std::move(e));
  }
  return out;
}

// The checkpoint's tensors with `edit` applied (by name; return false to drop the tensor), and those of
// `also` appended (another checkpoint's, say).
void rewrite_tensors(const std::string& dir, const std::function<bool(StEntry&)>& edit, std::vector<StEntry> also = {}) {
  std::vector<StEntry> out;
  for (StEntry& e : read_tensors(dir))
    if (edit(e)) out.push_back(std::move(e));
  for (StEntry& e : also) out.push_back(std::move(e));
  write_safetensors(dir + "/model.safetensors", out);
}

std::vector<float> logits_of(const std::string& dir, const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  auto m = HfModel::open(dir);
  Context ctx(Device{}, 2);
  Transformer tf(*m, ctx, false);
  Tensor l = tf.forward_logits(ids.data(), nullptr, B, T);
  return {l.f32(), l.f32() + l.numel()};
}

TEST(MoeConfig, ParsesEachArchitecture) {
  const ModelConfig q3 = load_model_config(kDir + "qwen3_moe/per_expert/config.json");
  EXPECT_EQ(q3.moe.num_experts, 8);
  EXPECT_EQ(q3.moe.top_k, 3);
  EXPECT_EQ(q3.moe.expert_intermediate, 16);
  EXPECT_TRUE(q3.moe.norm_topk_prob);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.is_moe_layer(0));  // mlp_only_layers [0]
  EXPECT_TRUE(q3.is_moe_layer(1));
  EXPECT_EQ(q3.block_dims(0).moe.E, 0);
  EXPECT_EQ(q3.block_dims(0).I, 48);
  EXPECT_EQ(q3.block_dims(2).moe.K, 3);

  const ModelConfig q2 = load_model_config(kDir + "qwen2_moe/per_expert/config.json");
  EXPECT_EQ(q2.moe.shared_intermediate, 24);
  EXPECT_FALSE(q2.moe.norm_topk_prob);
  EXPECT_TRUE(q2.qkv_bias);
  for (int64_t l = 0; l < 4; ++l) EXPECT_EQ(q2.is_moe_layer(l), l % 2 == 1) << l;  // decoder_sparse_step 2

  const ModelConfig mx = load_model_config(kDir + "mixtral/per_expert/config.json");
  EXPECT_EQ(mx.moe.num_experts, 4);
  EXPECT_EQ(mx.moe.expert_intermediate, 16);
  EXPECT_TRUE(mx.moe.norm_topk_prob);  // softmax over the selected logits
  EXPECT_TRUE(mx.moe.mixtral_names);
  EXPECT_TRUE(mx.is_moe_layer(0) && mx.is_moe_layer(1));
}

TEST(MoeConfig, RefusesBadFieldsNamingThem) {
  struct Row {
    const char* c;
    const char* field;
    json value;  // null: remove the field
    const char* expect;
  };
  const Row rows[] = {
      {"qwen3_moe", "num_local_experts", nullptr, "num_experts: missing"},  // neither spelling
      {"qwen3_moe", "num_local_experts", 0, "must be a positive integer"},
      {"qwen3_moe", "num_experts", 7, "num_local_experts: 8 contradicts num_experts 7"},
      {"qwen3_moe", "num_experts_per_tok", 9, "exceeds num_local_experts 8"},
      {"qwen3_moe", "moe_intermediate_size", "16", "moe_intermediate_size"},
      {"qwen3_moe", "mlp_only_layers", json::array({0, 3}), "layer 3 is outside 0..2"},
      {"qwen3_moe", "decoder_sparse_step", 0, "decoder_sparse_step"},
      {"qwen3_moe", "num_local_experts", 5000, "num_experts"},
      {"qwen2_moe", "num_experts", nullptr, "num_experts: missing"},
      {"qwen2_moe", "shared_expert_intermediate_size", nullptr, "shared_expert_intermediate_size"},
      {"mixtral", "num_local_experts", nullptr, "num_local_experts"},
      {"mixtral", "router_jitter_noise", 0.1, "router_jitter_noise"},
  };
  for (const Row& r : rows) {
    json j = read_config(kDir + r.c + "/per_expert");
    if (r.value.is_null())
      j.erase(r.field);
    else
      j[r.field] = r.value;
    const std::string err = error_of([&] { parse_model_config(j, "cfg.json"); });
    EXPECT_NE(err.find("cfg.json"), std::string::npos) << r.c << " " << r.field << ": " << err;
    EXPECT_NE(err.find(r.expect), std::string::npos) << r.c << " " << r.field << ": " << err;
  }
}

// Both layouts load to the same weights, so their logits are identical, and both match transformers'.
TEST(MoeModel, LogitsMatchTransformersInBothLayouts) {
  for (const char* c : kCases) {
    auto golden = SafetensorsFile::open(kDir + c + "/expected.safetensors");
    const StTensorInfo* ti = golden->find("ids");
    ASSERT_TRUE(ti);
    const int64_t B = ti->shape[0], T = ti->shape[1];
    std::vector<int32_t> ids(size_t(B * T));
    std::memcpy(ids.data(), golden->bytes(*ti), ids.size() * 4);
    const ModelConfig cfg = load_model_config(kDir + c + "/per_expert/config.json");
    const auto expect = read_f32(*golden, "logits", size_t(B * T * cfg.vocab_size));
    const auto per_expert = logits_of(kDir + c + "/per_expert", ids, B, T);
    const auto fused = logits_of(kDir + c + "/fused", ids, B, T);
    EXPECT_TRUE(per_expert == fused) << c << ": the two layouts give different logits";
    double worst = 0, scale = 0;
    for (size_t i = 0; i < expect.size(); ++i) {
      worst = std::max(worst, std::abs(double(per_expert[i]) - double(expect[i])));
      scale = std::max(scale, std::abs(double(expect[i])));
    }
    EXPECT_LT(worst, 5e-6 * scale) << c << " (largest logit " << scale << ")";
  }
}

// Incremental decoding through MoE blocks gives the logits of the whole-sequence forward.
TEST(MoeModel, DecodeMatchesForward) {
  const std::string dir = kDir + "qwen2_moe/per_expert";
  auto m = HfModel::open(dir);
  Context ctx(Device{}, 2);
  Transformer tf(*m, ctx, true);
  const std::vector<int32_t> ids = {5, 17, 33, 8, 41, 12};
  Tensor full = tf.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
  const int64_t V = m->config().vocab_size;
  std::vector<float> last;
  for (size_t i = 0; i < ids.size(); i += 2) last = tf.decode(ids.data() + i, 2);
  const float* want = full.f32() + (int64_t(ids.size()) - 1) * V;
  EXPECT_LT(rel_err(last.data(), want, size_t(V)), 1e-5);
}

TEST(MoeModel, RefusesMissingOrMisshapenExpertTensors) {
  {  // a per-expert Linear missing
    const std::string d = copy_case("qwen3_moe", "per_expert", "missing");
    rewrite_tensors(d, [](StEntry& e) { return e.name != "model.layers.2.mlp.experts.5.up_proj.weight"; });
    const std::string err = error_of([&] { HfModel::open(d); });
    EXPECT_NE(err.find("'model.layers.2.mlp.experts.5.up_proj.weight' is missing"), std::string::npos) << err;
    fs::remove_all(d);
  }
  {  // a fused expert tensor with the wrong expert count
    const std::string d = copy_case("mixtral", "fused", "shape");
    Context ctx;
    rewrite_tensors(d, [&](StEntry& e) {
      if (e.name == "model.layers.1.mlp.experts.down_proj") e.tensor = Tensor::empty({3, 32, 16}, e.tensor.dtype(), ctx);
      return true;
    });
    const std::string err = error_of([&] { HfModel::open(d); });
    EXPECT_NE(err.find("'model.layers.1.mlp.experts.down_proj' has shape [3, 32, 16], config.json implies [4, 32, 16]"),
              std::string::npos)
        << err;
    fs::remove_all(d);
  }
  {  // the fused down_proj missing while gate_up_proj is there
    const std::string d = copy_case("qwen2_moe", "fused", "half");
    rewrite_tensors(d, [](StEntry& e) { return e.name != "model.layers.3.mlp.experts.down_proj"; });
    const std::string err = error_of([&] { HfModel::open(d); });
    EXPECT_NE(err.find("'model.layers.3.mlp.experts.down_proj' is missing"), std::string::npos) << err;
    fs::remove_all(d);
  }
  {  // both layouts in one layer: the fused tensors beside the per-expert ones (read with the fused
     // ones, the rest ignored, before the check)
    const std::string d = copy_case("qwen3_moe", "per_expert", "both");
    std::vector<StEntry> fused;
    for (StEntry& e : read_tensors(kDir + "qwen3_moe/fused"))
      if (e.name.rfind("model.layers.1.mlp.experts.", 0) == 0) fused.push_back(std::move(e));
    ASSERT_EQ(fused.size(), 2u);
    rewrite_tensors(d, [](StEntry&) { return true; }, std::move(fused));
    const std::string err = error_of([&] { HfModel::open(d); });
    EXPECT_NE(err.find("and the fused 'model.layers.1.mlp.experts.gate_up_proj' both hold layer 1's experts"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("tensor 'model.layers.1.mlp.experts."), std::string::npos) << err;
    fs::remove_all(d);
  }
  {  // an expert past the config's count (a checkpoint of a larger sibling, or a config edited down)
    for (const char* layout : {"per_expert", "fused"}) {
      const std::string d = copy_case("qwen3_moe", layout, "extra");
      const int64_t E = read_config(d)["num_local_experts"].get<int64_t>();
      Context ctx;
      std::vector<StEntry> extra;
      extra.push_back({"model.layers.2.mlp.experts." + std::to_string(E) + ".up_proj.weight",
                       Tensor::zeros({16, 32}, DType::BF16, ctx)});
      rewrite_tensors(d, [](StEntry&) { return true; }, std::move(extra));
      const std::string err = error_of([&] { HfModel::open(d); });
      const std::string want = "is expert " + std::to_string(E) + ", but config.json says " + std::to_string(E) + " experts";
      EXPECT_NE(err.find(want), std::string::npos) << layout << ": " << err;
      fs::remove_all(d);
    }
  }
  {  // expert tensors in a layer the config makes dense (qwen3_moe's mlp_only_layers [0])
    const std::string d = copy_case("qwen3_moe", "per_expert", "dense");
    Context ctx;
    std::vector<StEntry> extra;
    extra.push_back({"model.layers.0.mlp.experts.0.gate_proj.weight", Tensor::zeros({16, 32}, DType::BF16, ctx)});
    rewrite_tensors(d, [](StEntry&) { return true; }, std::move(extra));
    const std::string err = error_of([&] { HfModel::open(d); });
    EXPECT_NE(err.find("'model.layers.0.mlp.experts.0.gate_proj.weight' is an expert's, but config.json makes layer 0 a "
                       "dense feed-forward"),
              std::string::npos)
        << err;
    fs::remove_all(d);
  }
  {  // the shared expert's gate missing (Qwen2-MoE)
    const std::string d = copy_case("qwen2_moe", "per_expert", "gate");
    rewrite_tensors(d, [](StEntry& e) { return e.name != "model.layers.1.mlp.shared_expert_gate.weight"; });
    const std::string err = error_of([&] { HfModel::open(d); });
    EXPECT_NE(err.find("'model.layers.1.mlp.shared_expert_gate.weight' is missing"), std::string::npos) << err;
    fs::remove_all(d);
  }
}

}  // namespace
