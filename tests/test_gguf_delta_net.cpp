// GGUF of the Gated DeltaNet families (docs/gguf.md): Qwen3-Next as llama.cpp's qwen3next (in_proj_qkvz
// split into attn_qkv and attn_gate), Qwen3.5 and Qwen3.5-MoE as qwen35 / qwen35moe (value heads tiled in
// in_proj_qkv's V rows, the conv kernel, in_proj_z, in_proj_b/a, A_log, dt_bias and out_proj's columns),
// ssm_a = -exp(A_log), the ssm.* keys and the layer kinds. The orders are checked against hand-worked
// cases of convert_hf_to_gguf's reshapes, the file's tensors against the fake companion in that order, and
// the file reads back to the fake companion's weights.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/dtype.h"
#include "export/gguf_delta_net.h"
#include "export/gguf_model.h"
#include "io/atomic_file.h"
#include "io/gguf.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/quantize.h"
#include "quant/ggml_types.h"
#include "gguf_family_check.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;
using quant::GgmlType;
namespace fs = std::filesystem;

namespace {

// convert_hf_to_gguf's orders on 2 key heads of 2 value heads each, one dim per head: in_proj_qkvz's rows
// per key head are [q | k | v v | z z]; the tiled order takes value head r of every key head, then r + 1.
TEST(GgufDeltaNet, OrdersAreTheConvertersOnHandWorkedCases) {
  ModelConfig c;
  c.delta = {.Hk = 2, .Hv = 4, .Dk = 1, .Dv = 1, .K = 4};
  const auto parts = gguf_delta_parts("model.layers.0.linear_attn.in_proj_qkvz.weight", "blk.0.attn_qkv.weight", c);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].gguf_name, "blk.0.attn_qkv.weight");
  EXPECT_EQ(parts[0].rows, (std::vector<int64_t>{0, 6, 1, 7, 2, 3, 8, 9}));
  EXPECT_EQ(parts[1].gguf_name, "blk.0.attn_gate.weight");
  EXPECT_EQ(parts[1].rows, (std::vector<int64_t>{4, 5, 10, 11}));
  EXPECT_TRUE(gguf_delta_parts("model.layers.0.linear_attn.out_proj.weight", "x", c).empty());
  const std::string p = "model.layers.0.linear_attn.";
  EXPECT_EQ(gguf_delta_row_order(p + "in_proj_z.weight", c), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(gguf_delta_row_order(p + "A_log", c), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(gguf_delta_row_order(p + "in_proj_qkv.weight", c), (std::vector<int64_t>{0, 1, 2, 3, 4, 6, 5, 7}));
  EXPECT_EQ(gguf_delta_row_order(p + "conv1d.weight", c), (std::vector<int64_t>{0, 1, 2, 3, 4, 6, 5, 7}));
  EXPECT_EQ(gguf_delta_col_order(p + "out_proj.weight", c), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_TRUE(gguf_delta_row_order(p + "out_proj.weight", c).empty());
  c.delta.Dv = 2;  // whole heads move
  EXPECT_EQ(gguf_delta_row_order(p + "in_proj_z.weight", c), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
  c.delta.Hv = 2;  // one value head per key head: nothing moves
  EXPECT_TRUE(gguf_delta_row_order(p + "in_proj_z.weight", c).empty());
  EXPECT_TRUE(gguf_delta_col_order(p + "out_proj.weight", c).empty());
  float a[2] = {0.5f, -1.0f};
  gguf_delta_values(p + "A_log", a, 2);
  EXPECT_EQ(a[0], -std::exp(0.5f));
  EXPECT_EQ(a[1], -std::exp(-1.0f));
}

// Whole 256-element k-quant rows: hidden 256, heads of 64, 2 key heads and 4 value heads of 64.
json family_config(const std::string& variant) {
  json c = tiny_family_config(variant == "qwen3_next" ? "qwen3_next" : "qwen3_5_moe", 2);
  c["hidden_size"] = 256;
  c["intermediate_size"] = 256;
  c["moe_intermediate_size"] = 256;
  c["shared_expert_intermediate_size"] = 256;
  c["head_dim"] = 64;
  c["linear_key_head_dim"] = 64;
  c["linear_value_head_dim"] = 64;
  if (variant == "qwen3_5") {
    c["architectures"] = {"Qwen3_5ForCausalLM"};
    for (const char* k : {"num_experts", "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok"})
      c.erase(k);
  }
  if (variant != "qwen3_next") c["rope_parameters"]["mrope_section"] = {4, 2, 2};
  return c;
}

// A file tensor's values, dequantized.
std::vector<float> file_values(const GgufFile& g, const std::string& name) {
  for (const auto& t : g.tensors)
    if (t.name == name) {
      int64_t n = 1;
      for (uint64_t d : t.dims) n *= int64_t(d);
      const GgmlType type = GgmlType(t.type);
      std::vector<float> v(static_cast<size_t>(n));
      quant::ggml_dequantize(type, g.tensor_data(t, uint64_t(n / t.dims[0] * quant::ggml_row_bytes(type, int64_t(t.dims[0])))), v.data(), n);
      return v;
    }
  ADD_FAILURE() << name << " is not in the file";
  return {};
}

const Tensor& block_tensor(const BlockWeights& w, const std::string& name) {
  for (const auto& t : w.tensors)
    if (t.name == name) return t.in(w);
  throw std::runtime_error(name + " is not in the block");
}

// The layout llama.cpp's loaders want (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp).
void expect_layout(const GgufFile& g, const std::string& variant) {
  std::map<std::string, const GgufTensorInfo*> t;
  for (const auto& x : g.tensors) t[x.name] = &x;
  auto expect = [&](const std::string& name, std::vector<uint64_t> dims, std::optional<GgmlType> type = GgmlType::F32) {
    ASSERT_TRUE(t.count(name)) << variant << ": " << name;
    EXPECT_EQ(t[name]->dims, dims) << variant << ": " << name;
    if (type) {
      EXPECT_EQ(GgmlType(*type), GgmlType(t[name]->type)) << variant << ": " << name;
    }
  };
  const std::string arch = g.string("general.architecture", "");
  EXPECT_EQ(arch, variant == "qwen3_next" ? "qwen3next" : variant == "qwen3_5" ? "qwen35" : "qwen35moe");
  auto key = [&](const std::string& k) { return g.find(arch + "." + k); };
  expect("blk.0.attn_qkv.weight", {256, 512}, std::nullopt);  // 2 x 2 key heads of 64, 4 value heads of 64
  expect("blk.0.attn_gate.weight", {256, 256}, std::nullopt);
  expect("blk.0.ssm_conv1d.weight", {4, 512});
  expect("blk.0.ssm_a", {4});
  expect("blk.0.ssm_dt.bias", {4});
  expect("blk.0.ssm_norm.weight", {64});
  expect("blk.0.ssm_out.weight", {256, 256}, GgmlType::Q4_K);
  if (variant == "qwen3_next") expect("blk.0.ssm_ba.weight", {256, 8});
  else expect("blk.0.ssm_beta.weight", {256, 4}), expect("blk.0.ssm_alpha.weight", {256, 4});
  if (variant == "qwen3_next") {  // one tuned Linear: attn_qkv's type (attn_v's rule: 8 experts, q8_0)
    EXPECT_EQ(GgmlType(t.at("blk.0.attn_gate.weight")->type), GgmlType::Q8_0);
  } else {  // in_proj_z: llama.cpp's "other" tensors, the preset's type
    EXPECT_EQ(GgmlType(t.at("blk.0.attn_gate.weight")->type), GgmlType::Q4_K) << variant;
  }
  EXPECT_EQ(GgmlType(t.at("blk.0.attn_qkv.weight")->type), variant == "qwen3_5" ? GgmlType::Q4_K : GgmlType::Q8_0) << variant;
  expect("blk.1.attn_q.weight", {256, 512}, GgmlType::Q4_K);  // query and gate per head
  expect("blk.1.attn_q_norm.weight", {64});
  expect("blk.0.post_attention_norm.weight", {256});
  EXPECT_EQ(t.count("blk.0.ffn_norm.weight"), 0u);
  EXPECT_EQ(t.count("blk.0.attn_q.weight"), 0u);
  EXPECT_EQ(key("ssm.conv_kernel")->num, 4);
  EXPECT_EQ(key("ssm.state_size")->num, 64);
  EXPECT_EQ(key("ssm.group_count")->num, 2);
  EXPECT_EQ(key("ssm.time_step_rank")->num, 4);
  EXPECT_EQ(key("ssm.inner_size")->num, 256);
  EXPECT_EQ(key("rope.dimension_count")->num, 16);  // partial_rotary_factor 0.25 of 64
  EXPECT_EQ(key("attention.recurrent_layers")->nums, (std::vector<double>{1, 0}));
  if (variant != "qwen3_5") {
    EXPECT_EQ(key("expert_shared_feed_forward_length")->num, 256);
  }
  if (variant == "qwen3_next") {
    EXPECT_EQ(key("rope.dimension_sections"), nullptr);
  } else {
    ASSERT_NE(key("rope.dimension_sections"), nullptr);
    EXPECT_EQ(key("rope.dimension_sections")->nums, (std::vector<double>{4, 2, 2, 0}));
  }
}

// The file's rows and columns against the fake companion (the same values in fp16) in the converter's order:
// attn_qkv / attn_gate from in_proj_qkvz, ssm_out's columns and attn_gate's rows tiled, ssm_a = -exp(A_log).
void expect_file_order(const GgufFile& g, const HfModel& fake, const std::string& variant) {
  Context ctx(Device{}, 2);
  const BlockWeights w = fake.load_block(0, ctx);
  const int64_t C = 256, Dv = 64, Hk = 2, R = 2;
  auto same = [](float file, float fake_value) { return f16_to_f32(f32_to_f16(file)) == fake_value; };
  const Tensor& out = block_tensor(w, "linear_attn.out_proj.weight");
  const std::vector<float> ssm_out = file_values(g, "blk.0.ssm_out.weight");
  for (int64_t r = 0; r < C; r += 37)
    for (int64_t t = 0; t < Hk * R; ++t)
      for (int64_t i = 0; i < Dv; ++i) {
        const int64_t head = variant == "qwen3_next" ? t : (t % Hk) * R + t / Hk;
        ASSERT_TRUE(same(ssm_out[size_t(r * Hk * R * Dv + t * Dv + i)], out.f32()[r * Hk * R * Dv + head * Dv + i]))
            << variant << " ssm_out row " << r << " file head " << t;
      }
  const std::vector<float> gate = file_values(g, "blk.0.attn_gate.weight");
  const bool fused = variant == "qwen3_next";
  const Tensor& z = block_tensor(w, fused ? "linear_attn.in_proj_qkvz.weight" : "linear_attn.in_proj_z.weight");
  for (int64_t t = 0; t < Hk * R; ++t)
    for (int64_t i = 0; i < Dv; i += 7) {
      const int64_t k = fused ? t / R : t % Hk, r = fused ? t % R : t / Hk;  // qwen3next keeps grouped heads
      const int64_t row = fused ? k * (2 * 64 + 2 * R * Dv) + 2 * 64 + R * Dv + r * Dv + i : (k * R + r) * Dv + i;
      for (int64_t col = 0; col < C; col += 51)
        ASSERT_TRUE(same(gate[size_t((t * Dv + i) * C + col)], z.f32()[row * C + col])) << variant << " attn_gate";
    }
  const std::vector<float> a = file_values(g, "blk.0.ssm_a");
  const Tensor& a_log = block_tensor(w, "linear_attn.A_log");
  for (int64_t t = 0; t < Hk * R; ++t) {
    const int64_t head = fused ? t : (t % Hk) * R + t / Hk;
    EXPECT_EQ(a[size_t(t)], -std::exp(a_log.f32()[head])) << variant;
  }
}

TEST(GgufDeltaNet, LlamaCppLayoutInTheConvertersOrderReadsBackAsTheFakeCompanion) {
  for (const char* variant : {"qwen3_next", "qwen3_5", "qwen3_5_moe"}) {
    test::TempDir m(std::string("ggd_m_") + variant), q(std::string("ggd_q_") + variant);
    write_synthetic_model(m.path, family_config(variant), 71, DType::BF16);
    auto o = test::moe_quantize_options(m.path, q.path, 2);
    o.format = "gguf:q4_k_m,fake";
    quantize_model(o);
    const std::string file = test::gguf_file_in(q.path + "/gguf-q4-k-m");
    const GgufFile g = GgufFile::open(file);
    expect_layout(g, variant);
    auto f = HfModel::open(q.path + "/fake");
    expect_file_order(g, *f, variant);
    if (std::string(variant) == "qwen3_5_moe") test::expect_world2_writes_the_same_file(o, file, "gguf-q4-k-m");
    auto gm = open_model(file);
    EXPECT_EQ(gm->config().architecture, f->config().architecture);
    EXPECT_EQ(gm->config().delta_layers, f->config().delta_layers);
    EXPECT_EQ(gm->config().rotary_dims, f->config().rotary_dims);
    EXPECT_EQ(gm->config().moe.num_experts, f->config().moe.num_experts);
    test::expect_blocks_equal_fake(*gm, *f, variant, {"linear_attn.A_log"});  // log(-(-exp(x))): an ulp or two
  }
}

// What llama.cpp's loaders cannot hold is refused before anything is written.
TEST(GgufDeltaNet, RefusedBeforeWriting) {
  struct Case {
    const char* variant;
    json change;
    const char* why;
  };
  const Case cases[] = {
      {"qwen3_next", {{"linear_value_head_dim", 32}}, "has linear_key_head_dim != linear_value_head_dim"},
      {"qwen3_next", {{"attention_bias", true}}, "has attention_bias true"},
      {"qwen3_next", {{"num_experts", 0}}, "has no experts (num_experts 0)"},
      {"qwen3_next", {{"mlp_only_layers", {0}}}, "has dense layers"},
  };
  for (const Case& c : cases) {
    json cfg = family_config(c.variant);
    cfg.update(c.change);
    test::expect_gguf_refused_before_writing(cfg, c.why, 72);
  }
}

// The committed seeds read back; llama.cpp's converter's MTP layers (nextn_predict_layers, set in place of a
// key of the same length) are refused naming the key.
TEST(GgufDeltaNet, ReadBackRefusesMtpLayers) {
  const std::string dir = std::string(AR_SOURCE_DIR) + "/fuzz/corpus/gguf_tensors/";
  for (const char* f : {"qwen3next_q4_0.gguf", "qwen35moe_q4_0.gguf"}) EXPECT_NO_THROW(open_model(dir + f)) << f;
  test::expect_edited_file_refused(dir + "qwen3next_q4_0.gguf", "qwen3next.rope.dimension_count",
                                   "qwen3next.nextn_predict_layers",
                                   "'qwen3next.nextn_predict_layers' > 0: MTP layers are not read");
}

}  // namespace
