// GGUF of the 2026 families (docs/gguf.md): DeepSeek-V3 as llama.cpp's deepseek2 (MLA's kv_b_proj split
// into attn_k_b / attn_v_b, the latent as one KV head, YaRN keys, group-limited sigmoid routing with
// exp_probs_b, leading dense layers, shared experts) and GLM-4.5 as glm4moe (post_attention_norm, partial
// RoPE, q/k/v biases or q/k norm) and gpt-oss as gpt-oss (sinks, the router's and experts' biases stacked
// like their weights, the sliding layers' pattern, YaRN). Each file holds llama.cpp's tensors and keys, and reads back through
// our reader to the fake companion's weights (world 2 writes the serial bytes); what llama.cpp cannot
// run is refused before writing.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/atomic_file.h"
#include "io/gguf.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/quantize.h"
#include "quant/ggml_types.h"
#include "quant/signround.h"
#include "gguf_family_check.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;
using quant::GgmlType;
namespace fs = std::filesystem;

namespace {

// Whole 256-element k-quant rows wherever the shapes allow.
json family_config(const std::string& variant) {
  if (variant.rfind("gemma3", 0) == 0) {  // query_pre_attn_scalar = head_dim, as llama.cpp scales below 27B
    json c = tiny_gemma3_config(variant == "gemma3" ? 3 : 6);
    c["hidden_size"] = 256;
    c["intermediate_size"] = 256;
    c["head_dim"] = 64;
    c["query_pre_attn_scalar"] = 64;
    if (variant == "gemma3_pattern6") c.erase("layer_types"), c["sliding_window_pattern"] = 6;  // llama.cpp's default
    return c;
  }
  if (variant.rfind("gpt_oss", 0) == 0) {  // llama.cpp's fixed clamp; every layer MoE
    json c = tiny_moe_config("gpt_oss", 3);
    c["hidden_size"] = 256;
    c["intermediate_size"] = 256;
    c["head_dim"] = 64;
    c["swiglu_limit"] = 7.0;
    if (variant == "gpt_oss_types") c["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
    return c;
  }
  const bool glm = variant.rfind("glm", 0) == 0;
  json c = tiny_moe_config(glm ? "glm4_moe" : "deepseek_v3", 3);
  c["hidden_size"] = 256;
  c["intermediate_size"] = 256;
  c["moe_intermediate_size"] = 256;
  if (glm) {
    c["head_dim"] = 64;
    if (variant == "glm_qk_norm") c["attention_bias"] = false, c["use_qk_norm"] = true;
    return c;
  }
  c["q_lora_rank"] = variant == "deepseek_no_q_lora" ? json(nullptr) : json(256);
  c["kv_lora_rank"] = 256;
  c["qk_nope_head_dim"] = 32;
  c["qk_rope_head_dim"] = 32;
  c["v_head_dim"] = 64;
  return c;
}

// The file's layout as llama.cpp's loader wants it (src/models/deepseek2.cpp, glm4-moe.cpp).
void expect_layout(const GgufFile& g, const std::string& variant) {
  std::map<std::string, const GgufTensorInfo*> t;
  for (const auto& x : g.tensors) t[x.name] = &x;
  auto expect = [&](const std::string& name, GgmlType type, std::vector<uint64_t> dims) {
    ASSERT_TRUE(t.count(name)) << variant << ": " << name;
    EXPECT_EQ(GgmlType(t[name]->type), type) << variant << ": " << name;
    EXPECT_EQ(t[name]->dims, dims) << variant << ": " << name;
  };
  auto key = [&](const std::string& k) { return g.find(g.string("general.architecture", "") + "." + k); };
  if (variant.rfind("gemma3", 0) == 0) {  // src/models/gemma3.cpp: norms as 1 + w, sandwich norms' names
    EXPECT_EQ(g.string("general.architecture", ""), "gemma3");
    expect("blk.0.attn_norm.weight", GgmlType::F32, {256});
    expect("blk.0.post_attention_norm.weight", GgmlType::F32, {256});
    expect("blk.0.ffn_norm.weight", GgmlType::F32, {256});
    expect("blk.0.post_ffw_norm.weight", GgmlType::F32, {256});
    expect("blk.0.attn_q_norm.weight", GgmlType::F32, {64});
    expect("blk.1.ffn_gate.weight", GgmlType::Q4_K, {256, 256});
    EXPECT_EQ(t.count("output.weight"), 0u);  // tied
    EXPECT_EQ(key("attention.sliding_window")->num, 16);
    EXPECT_EQ(key("rope.freq_base_swa")->num, 10000);
    EXPECT_EQ(key("rope.freq_base")->num, 1e6);
    EXPECT_EQ(key("rope.scaling.type")->str, "linear");
    EXPECT_EQ(key("rope.scaling.factor")->num, 2);
    EXPECT_EQ(key("final_logit_softcapping")->num, 30);
    const GgufValue* pattern = key("attention.sliding_window_pattern");
    if (variant == "gemma3_pattern6") {
      EXPECT_EQ(pattern, nullptr);
      return;
    }
    ASSERT_NE(pattern, nullptr);
    EXPECT_EQ(pattern->nums, (std::vector<double>{1, 0, 1}));
    return;
  }
  if (variant.rfind("gpt_oss", 0) == 0) {  // src/models/openai-moe.cpp
    EXPECT_EQ(g.string("general.architecture", ""), "gpt-oss");
    expect("blk.0.attn_sinks.weight", GgmlType::F32, {4});
    expect("blk.0.attn_output.bias", GgmlType::F32, {256});
    expect("blk.0.post_attention_norm.weight", GgmlType::F32, {256});
    expect("blk.0.ffn_gate_inp.weight", GgmlType::F32, {256, 8});
    expect("blk.0.ffn_gate_inp.bias", GgmlType::F32, {8});
    expect("blk.2.ffn_up_exps.weight", GgmlType::Q4_K, {256, 256, 8});
    expect("blk.2.ffn_gate_exps.bias", GgmlType::F32, {256, 8});
    expect("blk.2.ffn_up_exps.bias", GgmlType::F32, {256, 8});
    expect("blk.2.ffn_down_exps.bias", GgmlType::F32, {256, 8});
    EXPECT_EQ(t.count("blk.0.ffn_norm.weight"), 0u);
    EXPECT_EQ(key("expert_feed_forward_length")->num, 256);
    EXPECT_EQ(key("attention.sliding_window")->num, 16);
    EXPECT_EQ(key("rope.scaling.type")->str, "yarn");
    EXPECT_EQ(key("rope.scaling.original_context_length")->num, 4096);
    const GgufValue* pattern = key("attention.sliding_window_pattern");
    if (variant == "gpt_oss") {
      EXPECT_EQ(pattern, nullptr);  // llama.cpp's default: even layers slide
      return;
    }
    ASSERT_NE(pattern, nullptr);
    EXPECT_EQ(pattern->elem, GgufType::Bool);
    EXPECT_EQ(pattern->nums, (std::vector<double>{0, 1, 1}));
    return;
  }
  expect("blk.0.ffn_gate.weight", GgmlType::Q4_K, {256, 256});  // the leading dense layer
  expect("blk.1.ffn_gate_inp.weight", GgmlType::F32, {256, 8});
  expect("blk.1.exp_probs_b.bias", GgmlType::F32, {8});
  expect("blk.1.ffn_up_exps.weight", GgmlType::Q4_K, {256, 256, 8});
  expect("blk.2.ffn_down_shexp.weight", GgmlType::Q6_K, {256, 256});  // use_more_bits(2, 3)
  EXPECT_EQ(key("leading_dense_block_count")->num, 1);
  EXPECT_EQ(key("expert_gating_func")->num, 2);
  EXPECT_EQ(key("expert_shared_count")->num, 1);
  EXPECT_EQ(key("expert_weights_norm")->num, 1);
  EXPECT_EQ(t.count("blk.3.attn_norm.weight"), 0u);
  if (variant.rfind("glm", 0) == 0) {
    EXPECT_EQ(g.string("general.architecture", ""), "glm4moe");
    expect("blk.1.post_attention_norm.weight", GgmlType::F32, {256});
    EXPECT_EQ(t.count("blk.1.ffn_norm.weight"), 0u);
    EXPECT_EQ(key("rope.dimension_count")->num, 32);  // half of head_dim 64
    EXPECT_EQ(t.count("blk.0.attn_q.bias"), variant == "glm45" ? 1u : 0u);
    EXPECT_EQ(t.count("blk.0.attn_q_norm.weight"), variant == "glm45" ? 0u : 1u);
    return;
  }
  EXPECT_EQ(g.string("general.architecture", ""), "deepseek2");
  expect("blk.1.attn_k_b.weight", GgmlType::F16, {32, 256, 4});  // {nope, kv_lora, heads}: the tuned values
  expect("blk.1.attn_v_b.weight", GgmlType::Q4_K, {256, 64, 4});  // {kv_lora, v, heads}: the tuned bytes
  expect("blk.1.attn_kv_a_mqa.weight", GgmlType::Q4_K, {256, 288});
  EXPECT_EQ(t.count("blk.1.attn_kv_b.weight"), 0u);
  EXPECT_EQ(key("attention.head_count_kv")->num, 1);
  EXPECT_EQ(key("attention.key_length")->num, 288);
  EXPECT_EQ(key("attention.value_length")->num, 256);
  EXPECT_EQ(key("attention.key_length_mla")->num, 64);
  EXPECT_EQ(key("attention.value_length_mla")->num, 64);
  EXPECT_EQ(key("rope.dimension_count")->num, 32);
  EXPECT_EQ(key("expert_group_count")->num, 4);
  EXPECT_EQ(key("expert_group_used_count")->num, 2);
  EXPECT_FLOAT_EQ(float(key("expert_weights_scale")->num), 2.5f);
  EXPECT_EQ(key("rope.scaling.type")->str, "yarn");
  EXPECT_FLOAT_EQ(float(key("rope.scaling.yarn_log_multiplier")->num), 0.1f);
  if (variant == "deepseek_no_q_lora") {
    EXPECT_EQ(key("attention.q_lora_rank")->num, 0);  // llama.cpp requires the key
    expect("blk.1.attn_q.weight", GgmlType::Q4_K, {256, 256});
  } else {
    expect("blk.1.attn_q_a.weight", GgmlType::Q4_K, {256, 256});
    expect("blk.1.attn_q_a_norm.weight", GgmlType::F32, {256});
  }
}

TEST(GgufFamilies, LlamaCppLayoutReadsBackAsTheFakeCompanion) {
  for (const char* variant : {"deepseek", "deepseek_no_q_lora", "glm45", "glm_qk_norm", "gpt_oss", "gpt_oss_types", "gemma3",
                              "gemma3_pattern6"}) {
    test::TempDir m(std::string("ggf_m_") + variant), q(std::string("ggf_q_") + variant);
    write_synthetic_model(m.path, family_config(variant), 61, DType::BF16);
    auto o = test::moe_quantize_options(m.path, q.path, 2);
    o.format = "gguf:q4_k_m,fake";
    quantize_model(o);
    const std::string file = test::gguf_file_in(q.path + "/gguf-q4-k-m");
    expect_layout(GgufFile::open(file), variant);
    if (std::string(variant) == "deepseek") test::expect_world2_writes_the_same_file(o, file, "gguf-q4-k-m");
    auto gm = open_model(file), f = HfModel::open(q.path + "/fake");
    EXPECT_EQ(gm->config().architecture, f->config().architecture);
    EXPECT_EQ(gm->config().mla.q_lora_rank, f->config().mla.q_lora_rank) << variant;
    EXPECT_EQ(gm->config().rotary_dims, f->config().rotary_dims) << variant;
    EXPECT_EQ(gm->config().rope_scaling.type, f->config().rope_scaling.type) << variant;
    EXPECT_EQ(gm->config().moe.n_group, f->config().moe.n_group) << variant;
    EXPECT_EQ(gm->config().moe.routed_scaling_factor, f->config().moe.routed_scaling_factor) << variant;
    EXPECT_EQ(gm->config().sliding_layers, f->config().sliding_layers) << variant;
    EXPECT_EQ(gm->config().sliding_window, f->config().sliding_window) << variant;
    EXPECT_EQ(gm->config().attn_sinks, f->config().attn_sinks) << variant;
    EXPECT_EQ(gm->config().moe.expert_intermediate, f->config().moe.expert_intermediate) << variant;
    EXPECT_EQ(gm->config().attn_scale, f->config().attn_scale) << variant;
    EXPECT_EQ(gm->config().final_logit_softcap, f->config().final_logit_softcap) << variant;
    EXPECT_EQ(gm->config().sliding_rope.has_value(), f->config().sliding_rope.has_value()) << variant;
    test::expect_blocks_equal_fake(*gm, *f, variant);
  }
}

// What llama.cpp's graphs cannot run is refused before anything is written, naming the reason.
TEST(GgufFamilies, RefusedBeforeWriting) {
  struct Case {
    const char* arch;
    json change;
    const char* why;
  };
  const Case cases[] = {
      {"deepseek_v3", {{"rope_interleave", false}}, "rope_interleave false"},
      {"deepseek_v3",
       {{"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}, {"mscale", 0.5},
                          {"mscale_all_dim", 1.0}}}},
       "mscale != mscale_all_dim"},
      {"deepseek_v32", json::object(), "architecture 'DeepseekV32ForCausalLM' is not supported"},
      {"gpt_oss", json::object(), "swiglu_alpha / swiglu_limit other than 1.702 / 7"},  // the tiny config's 1.5
      {"gpt_oss", {{"swiglu_limit", 7.0}, {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 16.0},
                   {"original_max_position_embeddings", 64}}}}, "beta_fast / beta_slow other than 32 / 1"},
      {"gpt_oss", {{"swiglu_limit", 7.0}, {"sliding_window", nullptr}}, "sliding layers without a window"},
      {"gemma3", json::object(), "query_pre_attn_scalar other than 16"},  // the tiny config's 24
  };
  for (const Case& c : cases) {
    json cfg = tiny_family_config(c.arch, 2);
    cfg.update(c.change);
    test::expect_gguf_refused_before_writing(cfg, c.why, 62);
  }
}

// The committed deepseek2 / glm4moe seeds read back; a key changed in place (same length, so the file
// stays well formed) is refused naming it: the legacy unsplit MLA layout, softmax gating, MTP layers.
TEST(GgufFamilies, ReadBackRefusesWhatItDoesNotRun) {
  const std::string dir = std::string(AR_SOURCE_DIR) + "/fuzz/corpus/gguf_tensors/";
  struct Edit {
    const char* file;
    std::string from, to;  // bytes of the file, replaced once
    const char* why;
  };
  auto u32_key = [](const std::string& key, uint32_t v) {
    std::string s(8, '\0');
    const uint64_t n = key.size();
    std::memcpy(s.data(), &n, 8);
    s += key;
    s.append(4, '\0');
    const uint32_t type = 4;  // u32
    std::memcpy(s.data() + s.size() - 4, &type, 4);
    s.append(reinterpret_cast<const char*>(&v), 4);
    return s;
  };
  const Edit edits[] = {
      {"deepseek2_q4_0.gguf", "deepseek2.attention.key_length_mla", "deepseek2.attention.key_length_mlX",
       "key_length_mla' or value_length_mla is missing"},
      {"deepseek2_q4_0.gguf", u32_key("deepseek2.expert_gating_func", 2), u32_key("deepseek2.expert_gating_func", 1),
       "'deepseek2.expert_gating_func' = 1: only sigmoid gating (2) is read"},
      {"glm4moe_q8_0.gguf", u32_key("glm4moe.rope.dimension_count", 8), u32_key("glm4moe.nextn_predict_layers", 1),
       "'glm4moe.nextn_predict_layers' > 0: MTP layers are not read"},
  };
  for (const char* f : {"deepseek2_q4_0.gguf", "glm4moe_q8_0.gguf"}) EXPECT_NO_THROW(open_model(dir + f)) << f;
  for (const Edit& e : edits) test::expect_edited_file_refused(dir + e.file, e.from, e.to, e.why);
}

}  // namespace
