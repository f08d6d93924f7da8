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

std::string gguf_file_in(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf") return e.path().string();
  return {};
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
    const std::string file = gguf_file_in(q.path + "/gguf-q4-k-m");
    const GgufFile g = GgufFile::open(file);
    expect_layout(g, variant);
    auto f = HfModel::open(q.path + "/fake");
    expect_file_order(g, *f, variant);
    if (std::string(variant) == "qwen3_5_moe") {  // the data-parallel lane writes the serial file's bytes
      test::TempDir q2("ggd_q2");
      auto o2 = o;
      o2.output_dir = q2.path;
      o2.parallel = parallel::ParallelSetting::parse("2");
      o2.devices = "cpu:0,cpu:1";
      quantize_model(o2);
      EXPECT_TRUE(read_text_file(gguf_file_in(q2.path + "/gguf-q4-k-m")) == read_text_file(file)) << "world 2";
    }
    auto gm = open_model(file);
    EXPECT_EQ(gm->config().architecture, f->config().architecture);
    EXPECT_EQ(gm->config().delta_layers, f->config().delta_layers);
    EXPECT_EQ(gm->config().rotary_dims, f->config().rotary_dims);
    EXPECT_EQ(gm->config().moe.num_experts, f->config().moe.num_experts);
    Context ctx(Device{}, 2);
    for (int64_t l = 0; l < gm->config().num_layers; ++l) {
      const BlockWeights wa = gm->load_block(l, ctx), wb = f->load_block(l, ctx);
      ASSERT_EQ(wa.tensors.size(), wb.tensors.size());
      for (size_t k = 0; k < wa.tensors.size(); ++k) {
        const Tensor &a = wa.tensors[k].in(wa), &b = wb.tensors[k].in(wb);
        const std::string& name = wa.tensors[k].name;
        const bool half = wa.tensors[k].role == TensorRole::Linear;  // fake writes the dequantized Linears in fp16
        const bool a_log = name == "linear_attn.A_log";  // log(-(-exp(x))) within an ulp or two of x
        for (int64_t i = 0; i < a.numel(); ++i) {
          const float want = half ? f16_to_f32(f32_to_f16(a.f32()[i])) : a.f32()[i];
          if (a_log) {
            ASSERT_NEAR(want, b.f32()[i], 1e-6f * (1 + std::abs(b.f32()[i]))) << variant << " layer " << l;
          } else {
            ASSERT_EQ(want, b.f32()[i]) << variant << " layer " << l << " " << name << " [" << i << "]";
          }
        }
      }
    }
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
    test::TempDir m("ggd_refuse_m");
    const std::string q = test::temp_path("ggd_refuse_q");
    json cfg = family_config(c.variant);
    cfg.update(c.change);
    write_synthetic_model(m.path, cfg, 72);
    auto o = test::moe_quantize_options(m.path, q, 0);
    o.format = "gguf:q4_k_m";
    o.overwrite = false;
    EXPECT_NE(test::error_of([&] { quantize_model(o); }).find(c.why), std::string::npos) << c.why;
    EXPECT_FALSE(fs::exists(q)) << c.why;
  }
}

// The committed seeds read back; llama.cpp's converter's MTP layers (nextn_predict_layers, set in place of a
// key of the same length) are refused naming the key.
TEST(GgufDeltaNet, ReadBackRefusesMtpLayers) {
  const std::string dir = std::string(AR_SOURCE_DIR) + "/fuzz/corpus/gguf_tensors/";
  for (const char* f : {"qwen3next_q4_0.gguf", "qwen35moe_q4_0.gguf"}) EXPECT_NO_THROW(open_model(dir + f)) << f;
  std::string bytes = read_text_file(dir + "qwen3next_q4_0.gguf");
  const std::string from = "qwen3next.rope.dimension_count", to = "qwen3next.nextn_predict_layers";
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
  test::TempDir t("ggd_mtp");
  write_file_atomic(t.path + "/mtp.gguf", bytes);
  try {
    open_model(t.path + "/mtp.gguf");
    ADD_FAILURE() << "accepted MTP layers";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("'qwen3next.nextn_predict_layers' > 0: MTP layers are not read"), std::string::npos)
        << e.what();
  }
}

}  // namespace
