// Model layer: config validation (each bad field named), architecture registry, HF directory loader
// (single file, sharded, bf16; every bad-input case), llama3 rope scaling, whole-model forward.
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/loader.h"
#include "model/rope_table.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
std::string tmpdir(const std::string& name) {
  std::string d = ar::test::temp_path("model_" + name);
  return d;
}

std::string config_error(const json& j) {
  try {
    parse_model_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string open_error(const std::string& dir) {
  try {
    Context ctx(Device{}, 1);
    auto m = HfModel::open(dir);
    for (int64_t l = 0; l < m->config().num_layers; ++l) m->load_block(l, ctx);
    m->load_lm_head(ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
#define EXPECT_HAS(s, sub) EXPECT_NE((s).find(sub), std::string::npos) << (s)
}  // namespace

TEST(Config, ParsesEachArchitecture) {
  json j = tiny_llama_config();
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.qkv_bias);
  j["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_TRUE(parse_model_config(j, "c").qkv_bias);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 32;
  c = parse_model_config(j, "c");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse_model_config(j, "c").dense_limit, 4096);
  EXPECT_EQ(parse_model_config(j, "c").dense_limit_field, "sliding_window");
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = true;
  c = parse_model_config(j, "c");
  EXPECT_TRUE(c.qkv_bias && c.o_bias);
}

TEST(Config, RejectsMissingContradictoryAndUnsupportedFields) {
  json j = tiny_llama_config();
  json k = j; k.erase("hidden_size");
  EXPECT_HAS(config_error(k), "config.json: field 'hidden_size': missing");
  k = j; k["num_key_value_heads"] = 3;
  EXPECT_HAS(config_error(k), "field 'num_key_value_heads': 3 does not divide");
  k = j; k["hidden_size"] = 66;
  EXPECT_HAS(config_error(k), "field 'hidden_size': 66 not divisible");
  k = j; k["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_HAS(config_error(k), "unknown architecture 'GPT2LMHeadModel'");
  k = j; k.erase("architectures");
  EXPECT_HAS(config_error(k), "field 'architectures'");
  k = j; k["hidden_act"] = "gelu";
  EXPECT_HAS(config_error(k), "field 'hidden_act'");
  k = j; k["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  EXPECT_HAS(config_error(k), "rope_type 'longrope' is not supported (default, linear, llama3, yarn)");
  k = j; k["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_HAS(config_error(k), "rope_scaling.original_max_position_embeddings': missing (rope_type yarn needs it)");
  k = j; k["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", -4.0}, {"original_max_position_embeddings", 16}};
  EXPECT_HAS(config_error(k), "rope_scaling.factor': must be a number in [0, 2^53]");
  k = j; k["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_HAS(config_error(k), "rope_scaling.low_freq_factor");
  k = j; k["vocab_size"] = "big";
  EXPECT_HAS(config_error(k), "field 'vocab_size'");
  k = j; k["attention_bias"] = "yes";  // wrong JSON type: still an ar::Error naming the file
  EXPECT_HAS(config_error(k), "config.json");
  k = j; k["mlp_bias"] = true;
  EXPECT_HAS(config_error(k), "mlp_bias");
}

TEST(Config, RopeParametersOfTransformers5) {
  // transformers 5 writes rope_theta only inside rope_parameters; it must reach the RoPE table.
  json j = tiny_llama_config();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100000.0}};
  ModelConfig c = parse_model_config(j, "c");
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  RopeTable t = make_rope_table(c, 4);
  const double inv1 = std::pow(100000.0, -2.0 / double(c.head_dim));  // pair 1 at position 1
  EXPECT_NEAR(t.cos[1 * size_t(c.head_dim / 2) + 1], std::cos(inv1), 1e-6);
  // Both spellings agreeing are fine; disagreeing ones are refused rather than guessed.
  j["rope_theta"] = 100000.0;
  EXPECT_EQ(parse_model_config(j, "c").rope_theta, 100000.0);
  j["rope_theta"] = 10000.0;
  EXPECT_HAS(config_error(j), "field 'rope_parameters.rope_theta': 100000.000000 contradicts rope_theta 10000");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  c = parse_model_config(j, "c");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  json k = j;
  k["rope_parameters"].erase("low_freq_factor");
  EXPECT_HAS(config_error(k), "rope_parameters.low_freq_factor");
  k = j;
  k["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_HAS(config_error(k), "rope_type 'llama3' contradicts rope_scaling 'default'");
  k = j;
  k.erase("rope_theta");
  k.erase("rope_scaling");
  k["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e4}}}, {"sliding_attention", {{"rope_theta", 1e6}}}};
  EXPECT_HAS(config_error(k), "per-layer-type RoPE parameters are not supported for LlamaForCausalLM");
  k["rope_parameters"] = {{"global", {{"rope_theta", 1e4}}}};
  EXPECT_HAS(config_error(k), "field 'rope_parameters.global': is not a layer type");
  k = j;
  k["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 1e4}, {"factor", 4.0}};
  EXPECT_HAS(config_error(k), "rope_type 'dynamic' is not supported");
  k = j;
  k["rope_parameters"]["rope_theta"] = -1;
  EXPECT_HAS(config_error(k), "rope_parameters.rope_theta': must be a positive number");
}

TEST(Config, FuzzWithSeededMutations) {
  const std::string base = tiny_llama_config().dump();
  std::mt19937_64 rng(7);
  const char* frag[] = {"-1", "0", "null", "\"x\"", "[]", "{}", "1e400", "true", "3.5"};
  for (int it = 0; it < 5000; ++it) {
    std::string m = base;
    if (rng() % 2) {
      m[rng() % m.size()] = char(rng());
    } else {
      size_t at = m.find(':', rng() % m.size());
      if (at != std::string::npos) m.insert(at + 1, frag[rng() % 9]);
    }
    json j = json::parse(m, nullptr, false);
    if (j.is_discarded()) continue;
    try {
      parse_model_config(j, "fuzz.json");
    } catch (const Error&) {
    }
  }
}

TEST(Rope, Llama3ScalingMatchesFormula) {
  RopeScaling s;
  s.type = "llama3"; s.factor = 8; s.low_freq_factor = 1; s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  auto base = rope_inv_freq(128, 500000.0, RopeScaling{});
  auto sc = rope_inv_freq(128, 500000.0, s);
  int low = 0, high = 0, mid = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    double wl = 2 * M_PI / base[i];
    if (wl < 8192.0 / 4) { EXPECT_DOUBLE_EQ(sc[i], base[i]); ++high; }
    else if (wl > 8192.0) { EXPECT_DOUBLE_EQ(sc[i], base[i] / 8); ++low; }
    else {
      double smooth = (8192.0 / wl - 1) / 3;
      EXPECT_NEAR(sc[i], (1 - smooth) * base[i] / 8 + smooth * base[i], 1e-15);
      ++mid;
    }
  }
  EXPECT_GT(low, 0); EXPECT_GT(high, 0); EXPECT_GT(mid, 0);  // all three regimes exercised
  EXPECT_DOUBLE_EQ(base[1], std::pow(500000.0, -2.0 / 128));
}

TEST(Loader, ShardedBf16AndSingleFileAgree) {
  std::string a = tmpdir("single"), b = tmpdir("sharded");
  json cfg = tiny_llama_config(3);
  write_synthetic_model(a, cfg, 5, DType::BF16, 1);
  write_synthetic_model(b, cfg, 5, DType::BF16, 3);
  Context ctx(Device{}, 2);
  auto ma = HfModel::open(a), mb = HfModel::open(b);
  Transformer ta(*ma, ctx, false), tb(*mb, ctx, true);
  std::vector<int32_t> ids = {1, 5, 77, 299, 3, 3, 150, 2};
  Tensor la = ta.forward_logits(ids.data(), nullptr, 2, 4), lb = tb.forward_logits(ids.data(), nullptr, 2, 4);
  ASSERT_EQ(la.numel(), lb.numel());
  for (int64_t i = 0; i < la.numel(); ++i) ASSERT_EQ(la.f32()[i], lb.f32()[i]);
  // Batched rows equal single-sequence runs, and right padding does not change real tokens.
  Tensor l1 = ta.forward_logits(ids.data() + 4, nullptr, 1, 4);
  for (int64_t i = 0; i < l1.numel(); ++i) EXPECT_NEAR(l1.f32()[i], la.f32()[4 * 300 + i], 1e-5);
  std::vector<int32_t> padded = {1, 5, 77, 0, 0};
  std::vector<uint8_t> mask = {1, 1, 1, 0, 0};
  Tensor lp = ta.forward_logits(padded.data(), mask.data(), 1, 5), lu = ta.forward_logits(padded.data(), nullptr, 1, 3);
  for (int64_t i = 0; i < 3 * 300; ++i) EXPECT_NEAR(lp.f32()[i], lu.f32()[i], 1e-5);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Loader, Qwen3AndQwen2BiasModelsLoadAndRun) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}) {
    std::string d = tmpdir(arch);
    json cfg = tiny_llama_config(1);
    cfg["architectures"] = {arch};
    cfg["tie_word_embeddings"] = true;
    write_synthetic_model(d, cfg, 9);
    Context ctx(Device{}, 1);
    auto m = HfModel::open(d);
    Transformer t(*m, ctx, false);
    std::vector<int32_t> ids = {1, 2, 3};
    Tensor l = t.forward_logits(ids.data(), nullptr, 1, 3);
    for (int64_t i = 0; i < l.numel(); ++i) ASSERT_TRUE(std::isfinite(l.f32()[i])) << arch;
    fs::remove_all(d);
  }
}

TEST(Loader, BadInputsNameFileAndTensor) {
  std::string d = tmpdir("bad");
  json cfg = tiny_llama_config(2);
  write_synthetic_model(d, cfg, 1, DType::F32, 2);
  EXPECT_EQ(open_error(d), "");
  // Missing shard named by the index.
  fs::rename(d + "/model-00002-of-00002.safetensors", d + "/moved");
  EXPECT_HAS(open_error(d), "shard 'model-00002-of-00002.safetensors'");
  // Truncated shard.
  fs::copy_file(d + "/moved", d + "/model-00002-of-00002.safetensors");
  fs::resize_file(d + "/model-00002-of-00002.safetensors", fs::file_size(d + "/moved") - 100);
  std::string e = open_error(d);
  EXPECT_HAS(e, "model-00002-of-00002.safetensors: truncated");
  fs::remove(d + "/model-00002-of-00002.safetensors");
  fs::rename(d + "/moved", d + "/model-00002-of-00002.safetensors");
  // Config contradicting the tensors.
  json c2 = cfg;
  c2["intermediate_size"] = 96;
  { std::ofstream(d + "/config.json") << c2.dump(); }
  EXPECT_HAS(open_error(d), "mlp.gate_proj.weight' has shape [128, 64], config.json implies [96, 64]");
  // Unknown architecture and a missing field.
  c2 = cfg; c2["architectures"] = {"FalconForCausalLM"};
  { std::ofstream(d + "/config.json") << c2.dump(); }
  EXPECT_HAS(open_error(d), "unknown architecture 'FalconForCausalLM'");
  c2 = cfg; c2.erase("num_hidden_layers");
  { std::ofstream(d + "/config.json") << c2.dump(); }
  EXPECT_HAS(open_error(d), "field 'num_hidden_layers': missing");
  { std::ofstream(d + "/config.json") << "{\"architectures\": [\"LlamaForCausalLM\""; }
  EXPECT_HAS(open_error(d), "config.json: invalid JSON");
  // A tensor missing from the model.
  { std::ofstream(d + "/config.json") << cfg.dump(); }
  json idx = read_json_file(d + "/model.safetensors.index.json");
  idx["weight_map"].erase("model.layers.1.mlp.up_proj.weight");
  { std::ofstream(d + "/model.safetensors.index.json") << idx.dump(); }
  EXPECT_HAS(open_error(d), "tensor 'model.layers.1.mlp.up_proj.weight' is missing");
  // Not a model directory at all.
  EXPECT_HAS(open_error(d + "/nope"), "no config.json");
  fs::remove_all(d);
}

TEST(Transformer, RejectsOutOfVocabularyIdsAndTooLongSequences) {
  std::string d = tmpdir("oov");
  write_synthetic_model(d, tiny_llama_config(1), 3);
  Context ctx(Device{}, 1);
  auto m = HfModel::open(d);
  Transformer t(*m, ctx, false);
  std::vector<int32_t> ids = {1, 300};
  EXPECT_THROW(t.forward_logits(ids.data(), nullptr, 1, 2), Error);
  std::vector<int32_t> longer(257, 1);
  EXPECT_THROW(t.forward_logits(longer.data(), nullptr, 1, 257), Error);
  fs::remove_all(d);
}

TEST(Transformer, KvCacheDecodeEqualsFullForward) {
  for (const char* arch : {"LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen2ForCausalLM"}) {
    std::string d = tmpdir(std::string("kv") + arch);
    json cfg = tiny_llama_config(2);
    cfg["architectures"] = {arch};
    write_synthetic_model(d, cfg, 11);
    Context ctx(Device{}, 2);
    auto m = HfModel::open(d);
    Transformer t(*m, ctx, true);
    std::vector<int32_t> ids = {1, 17, 250, 3, 99, 42, 7, 7, 123};
    const int64_t T = int64_t(ids.size()), V = 300;
    Tensor full = t.forward_logits(ids.data(), nullptr, 1, T);
    t.reset_decode();
    std::vector<float> last = t.decode(ids.data(), 4);  // a 4-token prompt, then one at a time
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(last[size_t(v)], full.f32()[3 * V + v], 1e-4) << arch;
    for (int64_t i = 4; i < T; ++i) {
      last = t.decode(&ids[size_t(i)], 1);
      for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(last[size_t(v)], full.f32()[i * V + v], 1e-4) << arch << " pos " << i;
    }
    fs::remove_all(d);
  }
}
