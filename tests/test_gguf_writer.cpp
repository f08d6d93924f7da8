// GGUF output: the streamed writer (every key/value type, tensor infos, aligned offsets, data bytes,
// atomicity, misuse errors), llama.cpp's tensor names, the llama Q/K row order, llama3 rope factors,
// and the model metadata + tokenizer checked against GGUF files llama.cpp's own converter wrote
// (stories260K; the llama-spm and gpt-2 vocabularies). AR_KEEP_GGUF=<dir> leaves the written files
// there for tools/check_gguf_py.py.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "export/gguf_model.h"
#include "export/gguf_tokenizer.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/llama2c.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/convert_llama2c.h"
#include "model/tokenizer/hf_bpe.h"
#include "test_util.h"
#include "stories260k_model.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
// A fresh directory for one test; kept under $AR_KEEP_GGUF when that is set.
struct OutDir {
  std::string path;
  bool keep = false;
  explicit OutDir(const std::string& name) {
    const char* k = std::getenv("AR_KEEP_GGUF");
    keep = k && *k;
    path = keep ? std::string(k) + "/" + name : test::temp_path(name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~OutDir() {
    if (!keep) fs::remove_all(path);
  }
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Bytes a key/value takes in the header, from what GgufFile read back.
uint64_t value_bytes(const GgufValue& v) {
  auto scalar = [](GgufType t) -> uint64_t {
    switch (t) {
      case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
      case GgufType::U16: case GgufType::I16: return 2;
      case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
      default: return 8;
    }
  };
  if (v.type == GgufType::String) return 8 + v.str.size();
  if (v.type != GgufType::Array) return scalar(v.type);
  uint64_t n = 12;
  if (v.elem == GgufType::String)
    for (const auto& s : v.strs) n += 8 + s.size();
  else
    n += v.nums.size() * scalar(v.elem);
  return n;
}

// Absolute offset of the data section: the header walked again, then aligned.
uint64_t data_start(const GgufFile& g) {
  uint64_t n = 24;
  for (const auto& [k, v] : g.kv) n += 8 + k.size() + 4 + value_bytes(v);
  for (const auto& t : g.tensors) n += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
  return align_up(n, uint64_t(g.number("general.alignment", 32)));
}

std::string tensor_bytes(const std::string& path, const GgufFile& g, const std::string& name) {
  const std::string all = read_text_file(path);
  for (const auto& t : g.tensors)
    if (t.name == name) return all.substr(size_t(data_start(g) + t.offset), size_t(ggml_tensor_nbytes(t.type, t.dims, name)));
  ADD_FAILURE() << path << ": no tensor " << name;
  return "";
}

template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::vector<uint16_t> f16_ramp(size_t n) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint16_t(0x3C00 + i);  // 1.0 and the next halves
  return v;
}
}  // namespace

namespace {
struct AllTypes {
  std::vector<float> a = std::vector<float>(3 * 5), b = std::vector<float>(7);
  std::vector<uint16_t> c = f16_ramp(64);
  AllTypes() {
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = -float(i);
  }
};

// One key of every scalar and array type, and three tensors (F32 2-D, F32 1-D in chunks, F16).
void write_all_types(const std::string& path, const AllTypes& t) {
  GgufWriter w(path);
  w.add_string("general.architecture", "test");
  w.add_u8("t.u8", 200); w.add_i8("t.i8", -100); w.add_u16("t.u16", 60000); w.add_i16("t.i16", -30000);
  w.add_u32("t.u32", 4000000000u); w.add_i32("t.i32", -2000000000); w.add_u64("t.u64", uint64_t(1) << 50);
  w.add_i64("t.i64", -(int64_t(1) << 50)); w.add_f32("t.f32", 0.25f); w.add_f64("t.f64", 1e-300);
  w.add_bool("t.bool", true); w.add_string("t.str", "h\xC3\xA9llo");
  w.add_array("t.arr_u8", std::vector<uint8_t>{1, 2, 255});
  w.add_array("t.arr_i8", std::vector<int8_t>{-1, 2});
  w.add_array("t.arr_u16", std::vector<uint16_t>{65535});
  w.add_array("t.arr_i16", std::vector<int16_t>{-5, 5});
  w.add_array("t.arr_u32", std::vector<uint32_t>{7, 8, 9});
  w.add_array("t.arr_i32", std::vector<int32_t>{-7});
  w.add_array("t.arr_u64", std::vector<uint64_t>{uint64_t(1) << 40});
  w.add_array("t.arr_i64", std::vector<int64_t>{-3});
  w.add_array("t.arr_f32", std::vector<float>{1.5f, -2.5f});
  w.add_array("t.arr_f64", std::vector<double>{0.125});
  w.add_bool_array("t.arr_bool", {true, false, true});
  w.add_array("t.arr_str", std::vector<std::string>{"a", "", "long string"});
  w.add_array("t.arr_empty", std::vector<float>{});
  w.add_tensor_info("a.weight", {5, 3}, 0, t.a.size() * 4);
  w.add_tensor_info("b.bias", {7}, 0, t.b.size() * 4);
  w.add_tensor_info("c.f16", {32, 2}, 1, t.c.size() * 2);
  w.write_header();
  w.write_tensor_data("a.weight", t.a.data(), t.a.size() * 4);
  w.write_tensor_chunk("b.bias", t.b.data(), 12);  // in two pieces
  w.write_tensor_chunk("b.bias", t.b.data() + 3, 16);
  w.write_tensor_data("c.f16", t.c.data(), t.c.size() * 2);
  EXPECT_FALSE(fs::exists(path));
  w.commit();
}
}  // namespace

TEST(GgufWriter, EveryValueTypeAndTensorReadsBack) {
  OutDir d("gguf_all_types");
  const std::string path = d.path + "/all_types.gguf";
  const AllTypes data;
  write_all_types(path, data);
  const auto &a = data.a, &b = data.b;
  const auto& c = data.c;
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.kv.size(), 26u);
  auto num = [&](const char* k, GgufType t) {
    EXPECT_EQ(g.find(k) ? int(g.find(k)->type) : -1, int(t)) << k;
    return g.number(k, -1);
  };
  EXPECT_EQ(num("t.u8", GgufType::U8), 200); EXPECT_EQ(num("t.i8", GgufType::I8), -100);
  EXPECT_EQ(num("t.u16", GgufType::U16), 60000); EXPECT_EQ(num("t.i16", GgufType::I16), -30000);
  EXPECT_EQ(num("t.u32", GgufType::U32), 4000000000.0); EXPECT_EQ(num("t.i32", GgufType::I32), -2000000000);
  EXPECT_EQ(num("t.u64", GgufType::U64), std::ldexp(1.0, 50)); EXPECT_EQ(num("t.i64", GgufType::I64), -std::ldexp(1.0, 50));
  EXPECT_EQ(num("t.f32", GgufType::F32), 0.25); EXPECT_EQ(num("t.f64", GgufType::F64), 1e-300);
  EXPECT_EQ(num("t.bool", GgufType::Bool), 1);
  EXPECT_EQ(g.string("t.str", ""), "h\xC3\xA9llo");
  auto arr = [&](const char* k, GgufType e) {
    const GgufValue* v = g.find(k);
    EXPECT_TRUE(v && v->type == GgufType::Array && v->elem == e) << k;
    return v ? v->nums : std::vector<double>();
  };
  EXPECT_EQ(arr("t.arr_u8", GgufType::U8), (std::vector<double>{1, 2, 255}));
  EXPECT_EQ(arr("t.arr_i8", GgufType::I8), (std::vector<double>{-1, 2}));
  EXPECT_EQ(arr("t.arr_u16", GgufType::U16), (std::vector<double>{65535}));
  EXPECT_EQ(arr("t.arr_i16", GgufType::I16), (std::vector<double>{-5, 5}));
  EXPECT_EQ(arr("t.arr_u32", GgufType::U32), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(arr("t.arr_i32", GgufType::I32), (std::vector<double>{-7}));
  EXPECT_EQ(arr("t.arr_u64", GgufType::U64), (std::vector<double>{std::ldexp(1.0, 40)}));
  EXPECT_EQ(arr("t.arr_i64", GgufType::I64), (std::vector<double>{-3}));
  EXPECT_EQ(arr("t.arr_f32", GgufType::F32), (std::vector<double>{1.5, -2.5}));
  EXPECT_EQ(arr("t.arr_f64", GgufType::F64), (std::vector<double>{0.125}));
  EXPECT_EQ(arr("t.arr_bool", GgufType::Bool), (std::vector<double>{1, 0, 1}));
  EXPECT_TRUE(arr("t.arr_empty", GgufType::F32).empty());
  EXPECT_EQ(g.strings("t.arr_str"), (std::vector<std::string>{"a", "", "long string"}));

  ASSERT_EQ(g.tensors.size(), 3u);
  EXPECT_EQ(g.tensors[0].name, "a.weight");
  EXPECT_EQ(g.tensors[0].dims, (std::vector<uint64_t>{5, 3}));
  EXPECT_EQ(g.tensors[2].type, 1u);
  EXPECT_EQ(g.tensors[1].offset, 64u);   // 60 bytes, padded to 32
  EXPECT_EQ(g.tensors[2].offset, 96u);   // 28 bytes, padded
  for (const auto& t : g.tensors) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  EXPECT_EQ(data_start(g) % 32, 0u);
  EXPECT_EQ(fs::file_size(path), data_start(g) + 96 + 128);  // the last tensor is padded too
  EXPECT_EQ(tensor_bytes(path, g, "a.weight"), std::string(reinterpret_cast<const char*>(a.data()), a.size() * 4));
  EXPECT_EQ(tensor_bytes(path, g, "b.bias"), std::string(reinterpret_cast<const char*>(b.data()), b.size() * 4));
  EXPECT_EQ(tensor_bytes(path, g, "c.f16"), std::string(reinterpret_cast<const char*>(c.data()), c.size() * 2));
}

TEST(GgufWriter, CustomAlignmentAndQuantizedSizes) {
  OutDir d("gguf_align");
  const std::string path = d.path + "/align64.gguf";
  std::string q4k(144 * 2, '\x11'), q8(34, '\x22');
  {
    GgufWriter w(path);
    w.add_u32("general.alignment", 64);
    EXPECT_EQ(w.alignment(), 64u);
    w.add_tensor_info("q4k", {512}, 12, q4k.size());  // Q4_K: 256 weights in 144 bytes
    w.add_tensor_info("q8", {32}, 8, q8.size());      // Q8_0: 32 in 34
    w.write_header();
    EXPECT_EQ(w.data_offset("q8"), 320u);
    w.write_tensor_data("q4k", q4k.data(), q4k.size());
    w.write_tensor_data("q8", q8.data(), q8.size());
    w.commit();
  }
  const GgufFile g = GgufFile::open(path);
  EXPECT_EQ(data_start(g) % 64, 0u);
  EXPECT_EQ(g.tensors[1].offset, 320u);
  EXPECT_EQ(tensor_bytes(path, g, "q8"), q8);
  EXPECT_EQ(ggml_tensor_nbytes(14, {256, 3}, "x"), 3u * 210);  // Q6_K
  EXPECT_EQ(ggml_tensor_nbytes(10, {256}, "x"), 84u);          // Q2_K
  EXPECT_EQ(ggml_tensor_nbytes(11, {256}, "x"), 110u);         // Q3_K
  EXPECT_EQ(ggml_tensor_nbytes(13, {256}, "x"), 176u);         // Q5_K
  EXPECT_EQ(ggml_tensor_nbytes(30, {3, 2}, "x"), 12u);         // BF16
}

TEST(GgufWriter, NothingAtThePathUntilCommit) {
  const std::string dir = test::temp_path("gguf_atomic");
  fs::create_directories(dir);
  const std::string path = dir + "/m.gguf";
  const float x[4] = {1, 2, 3, 4};
  {
    GgufWriter w(path);
    w.add_tensor_info("x", {4}, 0, 16);
    w.write_header();
    w.write_tensor_data("x", x, 16);
    EXPECT_FALSE(fs::exists(path));
  }  // destroyed without commit
  EXPECT_TRUE(fs::is_empty(dir)) << "a temporary was left behind";
  {
    GgufWriter w(path);
    w.add_tensor_info("x", {4}, 0, 16);
    w.write_header();
    EXPECT_THROW(w.commit(), Error);  // the tensor was never written
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(GgufWriter, MisuseIsRefusedNamingTheKeyOrTensor) {
  const std::string dir = test::temp_path("gguf_errors");
  fs::create_directories(dir);
  const std::string p = dir + "/e.gguf";
  const float x[8] = {};
  expect_error([&] { GgufWriter w(p); w.add_u32("k", 1); w.add_f32("k", 2); }, "duplicate GGUF key 'k'");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info("t", {4}, 0, 16); w.add_tensor_info("t", {4}, 0, 16); },
               "duplicate tensor 't'");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info(std::string(64, 'n'), {4}, 0, 16); }, "nnnn");
  expect_error([&] { GgufWriter w(p); w.add_string(std::string(70000, 'k'), "v"); }, "70000 bytes");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info("t", {4}, 0, 12); }, "tensor 't' declared with 12 bytes");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info("q", {100}, 12, 144); }, "tensor 'q': row length 100");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info("u", {4}, 99, 16); }, "tensor 'u': ggml type 99");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info("z", {4, 0}, 0, 0); }, "tensor 'z' has a zero dimension");
  expect_error([&] { GgufWriter w(p); w.add_tensor_info("d", {1, 1, 1, 1, 1}, 0, 4); }, "tensor 'd' has 5 dims");
  expect_error([&] { GgufWriter w(p); w.add_u32("general.alignment", 48); }, "general.alignment 48");
  auto two = [&](GgufWriter& w) {
    w.add_tensor_info("first", {4}, 0, 16);
    w.add_tensor_info("second", {8}, 0, 32);
    w.write_header();
  };
  expect_error([&] { GgufWriter w(p); two(w); w.write_tensor_data("second", x, 32); }, "tensor 'second' written out of order");
  expect_error([&] { GgufWriter w(p); two(w); w.write_tensor_data("first", x, 12); }, "tensor 'first' given 12 bytes of 16");
  expect_error([&] { GgufWriter w(p); two(w); w.write_tensor_chunk("first", x, 20); }, "tensor 'first' given 20 bytes of 16");
  expect_error([&] { GgufWriter w(p); two(w); w.write_tensor_chunk("first", x, 8); w.write_tensor_data("second", x, 32); },
               "'first', which is incomplete");
  expect_error([&] { GgufWriter w(p); two(w); w.add_u32("late", 1); }, "key 'late' added after write_header()");
  expect_error([&] { GgufWriter w(p); w.write_tensor_data("x", x, 4); }, "tensor 'x' written before write_header()");
  expect_error([&] {
    GgufWriter w(p);
    two(w);
    w.write_tensor_data("first", x, 16);
    w.write_tensor_data("second", x, 32);
    w.write_tensor_data("third", x, 4);
  }, "tensor 'third' written after every declared tensor");
  expect_error([&] { GgufWriter w(p); two(w); w.write_tensor_data("first", x, 16); w.commit(); },
               "tensor 'second' not written");
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

namespace {
ModelConfig llama_config(const std::string& arch = "LlamaForCausalLM") {
  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = 64, c.intermediate_size = 172, c.num_layers = 5, c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 8;
  c.vocab_size = 512, c.max_position_embeddings = 512, c.rms_norm_eps = 1e-5;
  return c;
}
}  // namespace

TEST(GgufModel, TensorNames) {
  ModelConfig c = llama_config();
  const std::pair<const char*, const char*> table[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
      {"model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight"},
      {"model.layers.2.self_attn.v_proj.weight", "blk.2.attn_v.weight"},
      {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
      {"model.layers.4.mlp.gate_proj.weight", "blk.4.ffn_gate.weight"},
      {"model.layers.4.mlp.up_proj.weight", "blk.4.ffn_up.weight"},
      {"model.layers.4.mlp.down_proj.weight", "blk.4.ffn_down.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight"},
  };
  for (const auto& [hf, gg] : table) EXPECT_EQ(gguf_tensor_name(hf, c), gg) << hf;
  expect_error([&] { gguf_tensor_name("model.layers.5.mlp.up_proj.weight", c); }, "in layer 5 of a model with 5");
  expect_error([&] { gguf_tensor_name("model.layers.0.self_attn.q_proj.bias", c); }, "q_proj.bias' is not a tensor of layer 0");
  expect_error([&] { gguf_tensor_name("model.layers.0.self_attn.q_norm.weight", c); }, "q_norm.weight' is not a tensor of layer 0");
  expect_error([&] { gguf_tensor_name("model.layers.0.mlp.experts.weight", c); }, "is not a tensor of layer 0");
  expect_error([&] { gguf_tensor_name("model.layers.x.mlp.up_proj.weight", c); }, "has no layer number");
  expect_error([&] { gguf_tensor_name("model.rotary_emb.inv_freq", c); }, "'model.rotary_emb.inv_freq'");
  ModelConfig q = llama_config("Qwen3ForCausalLM");
  q.qk_norm = true, q.qkv_bias = true;
  EXPECT_EQ(gguf_tensor_name("model.layers.1.self_attn.q_norm.weight", q), "blk.1.attn_q_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.self_attn.k_norm.weight", q), "blk.1.attn_k_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.self_attn.v_proj.bias", q), "blk.1.attn_v.bias");
  expect_error([&] { gguf_tensor_name("model.layers.1.self_attn.o_proj.bias", q); }, "o_proj.bias");
  EXPECT_EQ(gguf_architecture(q), "qwen3");
  EXPECT_EQ(gguf_architecture(llama_config("MistralForCausalLM")), "llama");
  EXPECT_EQ(gguf_architecture(llama_config("Qwen2ForCausalLM")), "qwen2");
  expect_error([&] { gguf_architecture(llama_config("GPT2LMHeadModel")); }, "'GPT2LMHeadModel' is not supported");
}

TEST(GgufModel, QkRowOrderByHand) {
  // Two heads of 4 rows: HF rotates (0,2) and (1,3) within a head, ggml (0,1) and (2,3).
  EXPECT_EQ(gguf_qk_row_order(8, 2), (std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(gguf_qk_row_order(6, 1), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  expect_error([] { gguf_qk_row_order(6, 2); }, "6 rows do not split into 2 heads of an even size");
  expect_error([] { gguf_qk_row_order(8, 3); }, "8 rows");
  const ModelConfig c = llama_config();
  EXPECT_EQ(gguf_tensor_row_order("model.layers.0.self_attn.q_proj.weight", c).size(), 64u);
  EXPECT_EQ(gguf_tensor_row_order("model.layers.0.self_attn.k_proj.weight", c), gguf_qk_row_order(32, 4));
  EXPECT_EQ(gguf_tensor_row_order("model.layers.0.self_attn.k_proj.bias", c), gguf_qk_row_order(32, 4));
  EXPECT_TRUE(gguf_tensor_row_order("model.layers.0.self_attn.v_proj.weight", c).empty());
  EXPECT_FALSE(gguf_tensor_row_order("model.layers.0.self_attn.q_proj.weight", llama_config("MistralForCausalLM")).empty());
  EXPECT_TRUE(gguf_tensor_row_order("model.layers.0.self_attn.q_proj.weight", llama_config("Qwen2ForCausalLM")).empty());
  EXPECT_TRUE(gguf_tensor_row_order("model.layers.0.self_attn.k_proj.weight", llama_config("Qwen3ForCausalLM")).empty());
}

TEST(GgufModel, Llama3RopeFactors) {
  ModelConfig c = llama_config();
  EXPECT_TRUE(gguf_extra_tensors(c).empty());
  c.head_dim = 128, c.rope_theta = 500000;
  c.rope_scaling = {"llama3", 8, 1, 4, 8192};
  const auto t = gguf_extra_tensors(c);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "rope_freqs.weight");
  EXPECT_EQ(t[0].dims, (std::vector<uint64_t>{64}));
  ASSERT_EQ(t[0].data.size(), 64u);
  EXPECT_EQ(t[0].data.front(), 1.0f);  // wavelength 2*pi: unchanged
  EXPECT_EQ(t[0].data.back(), 8.0f);   // longest wavelength: divided by the factor
  int blended = 0;
  for (size_t i = 0; i < t[0].data.size(); ++i) {
    if (i) {
      EXPECT_GE(t[0].data[i], t[0].data[i - 1]) << i;
    }
    blended += t[0].data[i] > 1 && t[0].data[i] < 8;
  }
  EXPECT_GT(blended, 0);
  // i = 2k: freq = 500000^(-2k/128); the blend is 1 / ((1 - s) / 8 + s), s = (8192 / wavelen - 1) / 3.
  for (size_t k = 0; k < 64; ++k) {
    const double freq = std::pow(500000.0, -double(2 * k) / 128), wl = 2 * M_PI / freq;
    const double want = wl < 2048 ? 1 : wl > 8192 ? 8 : 1 / ((1 - (8192 / wl - 1) / 3) / 8 + (8192 / wl - 1) / 3);
    EXPECT_NEAR(t[0].data[k], want, 1e-4 * want) << k;
  }
  ModelConfig q = llama_config("Qwen2ForCausalLM");
  q.rope_scaling = c.rope_scaling;
  expect_error([&] { gguf_extra_tensors(q); }, "rope scaling 'llama3' on Qwen2ForCausalLM is not supported");
}

namespace {
std::string converted_stories(const std::string& fx, const std::string& name) {
  const std::string dir = test::temp_path(name);
  test::convert_stories260k(fx, dir);
  return dir;
}

// The HF checkpoint of `dir` as an all-F32 GGUF (rows reordered for llama.cpp), with the metadata.
void write_f32_gguf(const std::string& dir, const ModelConfig& cfg, const std::string& out) {
  auto st = SafetensorsFile::open(dir + "/model.safetensors");
  GgufWriter w(out);
  add_gguf_model_metadata(w, cfg, dir, 0, "stories260K");
  for (const auto& t : st->header().tensors) {
    std::vector<uint64_t> dims(t.shape.rbegin(), t.shape.rend());
    w.add_tensor_info(gguf_tensor_name(t.name, cfg), dims, 0, t.end - t.begin);
  }
  w.write_header();
  for (const auto& t : st->header().tensors) {
    const uint8_t* src = st->bytes(t);
    const std::vector<int64_t> order = gguf_tensor_row_order(t.name, cfg);
    const size_t row = order.empty() ? 0 : (t.end - t.begin) / order.size();
    std::string bytes(reinterpret_cast<const char*>(src), t.end - t.begin);
    for (size_t r = 0; r < order.size(); ++r) std::memcpy(bytes.data() + r * row, src + size_t(order[r]) * row, row);
    w.write_tensor_data(gguf_tensor_name(t.name, cfg), bytes.data(), bytes.size());
  }
  w.commit();
}
}  // namespace

// stories260K converted to HF (convert_llama2c permutes Q/K rows to HF's layout) and written back
// as GGUF must give llama.cpp's own file: every tensor byte-identical (the Q/K order undoes the
// conversion's), the same vocabulary, the same hyperparameters.
TEST(GgufModel, Stories260kMatchesLlamaCppsFile) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string conv = converted_stories(fx, "gguf_s260");
  OutDir d("gguf_stories");
  const std::string out = d.path + "/stories260K-f32.gguf", ref_path = fx + "/stories260K/stories260K.gguf";
  const ModelConfig cfg = load_model_config(conv + "/config.json");
  write_f32_gguf(conv, cfg, out);
  const GgufFile g = GgufFile::open(out), ref = GgufFile::open(ref_path);
  for (const char* k : {"tokenizer.ggml.tokens"}) EXPECT_EQ(g.strings(k), ref.strings(k));
  for (const char* k : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    ASSERT_TRUE(g.find(k) && ref.find(k)) << k;
    EXPECT_EQ(int(g.find(k)->elem), int(ref.find(k)->elem)) << k;
    EXPECT_EQ(g.find(k)->nums, ref.find(k)->nums) << k;
  }
  for (const char* k : {"general.architecture", "tokenizer.ggml.model"}) EXPECT_EQ(g.string(k, "?"), ref.string(k, "!")) << k;
  for (const char* k : {"llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
                        "llama.attention.head_count_kv", "llama.block_count", "llama.rope.dimension_count",
                        "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.unknown_token_id",
                        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    EXPECT_EQ(g.number(k, -1), ref.number(k, -2)) << k;
    EXPECT_EQ(int(g.find(k)->type), int(ref.find(k)->type)) << k;
  }
  EXPECT_EQ(g.number("llama.context_length", 0), 512);  // config.json's; llama.cpp's file says 2048
  EXPECT_EQ(g.number("llama.rope.freq_base", 0), 10000);
  EXPECT_EQ(g.number("general.alignment", 0), 32);
  EXPECT_EQ(g.number("general.quantization_version", 0), 2);
  EXPECT_EQ(g.number("tokenizer.ggml.add_bos_token", -1), 1);
  // Tied embeddings: no output.weight here (llama.cpp falls back to token_embd); the reference has a copy.
  EXPECT_EQ(g.tensors.size() + 1, ref.tensors.size());
  for (const auto& t : g.tensors) {
    const auto r = std::find_if(ref.tensors.begin(), ref.tensors.end(), [&](const auto& x) { return x.name == t.name; });
    ASSERT_NE(r, ref.tensors.end()) << t.name;
    EXPECT_EQ(t.dims, r->dims) << t.name;
    EXPECT_TRUE(tensor_bytes(out, g, t.name) == tensor_bytes(ref_path, ref, t.name)) << t.name << " differs";
  }
  // Our reader of GGUF vocabularies tokenizes as llama2.c does.
  EXPECT_EQ(HfBpeTokenizer::from_gguf(out)->encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  fs::remove_all(conv);
}

// The same checkpoint read as Mistral stays "llama"; as Qwen2 its rows stay in HF order.
TEST(GgufModel, QkOrderUndoesTheLlama2cConversion) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string conv = converted_stories(fx, "gguf_s260_qk");
  const Llama2cCheckpoint c = read_llama2c(fx + "/stories260K/stories260K.bin");
  auto st = SafetensorsFile::open(conv + "/model.safetensors");
  const ModelConfig cfg = load_model_config(conv + "/config.json");
  for (const char* which : {"q_proj", "k_proj"}) {
    const std::string name = std::string("model.layers.2.self_attn.") + which + ".weight";
    const StTensorInfo* t = st->find(name);
    ASSERT_NE(t, nullptr);
    const auto order = gguf_tensor_row_order(name, cfg);
    const size_t rows = size_t(t->shape[0]), cols = size_t(t->shape[1]);
    ASSERT_EQ(order.size(), rows);
    const float* hf = reinterpret_cast<const float*>(st->bytes(*t));
    const std::vector<float>& src = which[0] == 'q' ? c.wq : c.wk;
    const float* l2c = src.data() + 2 * rows * cols;  // layer 2
    for (size_t r = 0; r < rows; ++r)
      ASSERT_EQ(std::memcmp(hf + size_t(order[r]) * cols, l2c + r * cols, cols * 4), 0) << which << " row " << r;
  }
  fs::remove_all(conv);
}

namespace {
std::string shared_tokenizers() {
  const std::string fx = test::fixtures_dir();
  return fx.empty() || !fs::exists(fx + "/tokenizers/gpt2/tokenizer.json") ? "" : fx + "/tokenizers";
}

void expect_vocab_like(const GgufVocab& v, const GgufFile& ref, bool scores) {
  EXPECT_EQ(v.model, ref.string("tokenizer.ggml.model", ""));
  EXPECT_EQ(v.tokens, ref.strings("tokenizer.ggml.tokens"));
  const auto& types = ref.find("tokenizer.ggml.token_type")->nums;
  EXPECT_EQ(std::vector<double>(v.types.begin(), v.types.end()), types);
  if (!scores) return;
  // Our scores come from merge ranks, llama.cpp's from SentencePiece: what matters is the order in
  // which mergeable pieces win, which must be the same.
  const auto& rs = ref.find("tokenizer.ggml.scores")->nums;
  std::vector<size_t> normal;
  for (size_t i = 0; i < v.types.size(); ++i)
    if (v.types[i] == 1 && v.scores[i] > -float(1 << 20) && rs[i] > -1e8) normal.push_back(i);
  std::sort(normal.begin(), normal.end(), [&](size_t a, size_t b) { return v.scores[a] > v.scores[b]; });
  size_t disagree = 0;
  for (size_t k = 1; k < normal.size(); ++k) disagree += rs[normal[k]] > rs[normal[k - 1]];
  EXPECT_EQ(disagree, 0u) << "of " << normal.size() << " merged pieces";
}
}  // namespace

TEST(GgufVocab, SentencePieceTokenizerJsonLikeLlamaCpp) {
  const std::string tk = shared_tokenizers();
  if (tk.empty()) GTEST_SKIP() << "tokenizer fixtures not found";
  const GgufVocab v = read_gguf_vocab(tk + "/llama2-spm", 32000);
  const GgufFile ref = GgufFile::open(tk + "/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  expect_vocab_like(v, ref, true);
  EXPECT_EQ(v.pre, "default");
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_EQ(v.add_bos, std::optional<bool>(true));
  EXPECT_EQ(v.add_eos, std::optional<bool>(false));
  // Written and read back by our GGUF vocabulary reader, it encodes as the tokenizer.json does.
  OutDir d("gguf_vocab_spm");
  const std::string out = d.path + "/llama-spm-vocab.gguf";
  {
    GgufWriter w(out);
    add_gguf_vocab(w, v);
    w.write_header();
    w.commit();
  }
  const auto a = HfBpeTokenizer::from_gguf(out);
  const auto b = HfBpeTokenizer::from_tokenizer_json(tk + "/llama2-spm/tokenizer.json", nlohmann::json::object());
  for (const char* text : {"Hello world", " leading space and  double", "naïve café 東京 3.14", "\n\ttabs\n"})
    EXPECT_EQ(a->encode(text), b->encode(text)) << text;
}

TEST(GgufVocab, ByteLevelTokenizerJsonLikeLlamaCpp) {
  const std::string tk = shared_tokenizers();
  if (tk.empty()) GTEST_SKIP() << "tokenizer fixtures not found";
  const GgufVocab v = read_gguf_vocab(tk + "/gpt2", 50257);
  const GgufFile ref = GgufFile::open(tk + "/llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
  expect_vocab_like(v, ref, false);
  EXPECT_EQ(v.pre, "gpt-2");
  EXPECT_EQ(v.merges, ref.strings("tokenizer.ggml.merges"));
  EXPECT_TRUE(v.scores.empty());
  OutDir d("gguf_vocab_gpt2");
  const std::string out = d.path + "/gpt2-vocab.gguf";
  {
    GgufWriter w(out);
    add_gguf_vocab(w, v);
    w.write_header();
    w.commit();
  }
  const auto a = HfBpeTokenizer::from_gguf(out);
  const auto b = HfBpeTokenizer::from_tokenizer_json(tk + "/gpt2/tokenizer.json", nlohmann::json::object());
  for (const char* text : {"Hello world", "it's 2024!  ok", "naïve café 東京 3.14", "<|endoftext|>x"})
    EXPECT_EQ(a->encode(text), b->encode(text)) << text;
}

// Qwen2.5's vocab.json + merges.txt + tokenizer_config.json, padded to the model's vocab_size, in a
// Qwen3 model's metadata.
TEST(GgufVocab, QwenVocabMergesAndMetadata) {
  const std::string tk = shared_tokenizers();
  if (tk.empty()) GTEST_SKIP() << "tokenizer fixtures not found";
  const std::string dir = test::temp_path("gguf_qwen");
  fs::create_directories(dir);
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) fs::copy_file(tk + "/qwen2.5/" + f, dir + "/" + f);
  ModelConfig c = llama_config("Qwen3ForCausalLM");
  c.vocab_size = 151936, c.hidden_size = 1024, c.num_heads = 16, c.num_kv_heads = 8, c.head_dim = 128, c.qk_norm = true;
  c.rope_theta = 1000000, c.rms_norm_eps = 1e-6, c.max_position_embeddings = 40960;
  OutDir d("gguf_qwen_meta");
  const std::string out = d.path + "/qwen3-meta.gguf";
  {
    GgufWriter w(out);
    add_gguf_model_metadata(w, c, dir, 15, "qwen-test");
    w.write_header();
    w.commit();
  }
  const GgufFile g = GgufFile::open(out);
  EXPECT_EQ(g.string("general.architecture", ""), "qwen3");
  EXPECT_EQ(g.number("general.file_type", 0), 15);
  EXPECT_EQ(g.number("qwen3.attention.key_length", 0), 128);
  EXPECT_EQ(g.number("qwen3.embedding_length", 0), 1024);
  EXPECT_EQ(g.number("qwen3.rope.freq_base", 0), 1000000);
  EXPECT_EQ(g.string("tokenizer.ggml.model", ""), "gpt2");
  EXPECT_EQ(g.string("tokenizer.ggml.pre", ""), "qwen2");
  const auto& toks = g.strings("tokenizer.ggml.tokens");
  const auto& types = g.find("tokenizer.ggml.token_type")->nums;
  ASSERT_EQ(toks.size(), 151936u);
  EXPECT_EQ(toks[151643], "<|endoftext|>");
  EXPECT_EQ(types[151643], 3);  // control
  EXPECT_EQ(toks[151935], "[PAD151935]");
  EXPECT_EQ(types[151935], 5);  // unused
  EXPECT_EQ(types[1000], 1);
  EXPECT_EQ(g.number("tokenizer.ggml.eos_token_id", -1), 151645);  // <|im_end|> in tokenizer_config
  EXPECT_FALSE(g.string("tokenizer.chat_template", "").empty());
  EXPECT_EQ(g.strings("tokenizer.ggml.merges").size(), 151387u);
  fs::remove_all(dir);
}

// DeepSeek-V3's pre-tokenizer as its tokenizer.json spells it (three isolating Splits, then ByteLevel
// without its regex) is llama.cpp's "deepseek-v3".
TEST(GgufVocab, DeepseekV3PreTokenizerIsNamed) {
  test::TempDir dir("gguf_dsv3_tok");
  std::ofstream(dir.path + "/tokenizer.json") << R"json({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
    "merges": ["a b"]}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
      {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false},
      {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}})json";
  EXPECT_EQ(read_gguf_vocab(dir.path, 3).pre, "deepseek-v3");
  // our tokenizer reads the same splits (PCRE2 compiles them) and encodes with them
  const auto t = HfBpeTokenizer::from_tokenizer_json(dir.path + "/tokenizer.json", nlohmann::json::object());
  EXPECT_EQ(t->encode("ab"), (std::vector<int32_t>{2}));
}

// o200k's split (GPT-4o; gpt-oss's o200k_harmony) as tokenizer.json spells it: CR and LF as regex escapes.
TEST(GgufVocab, Gpt4oPreTokenizerIsNamed) {
  test::TempDir dir("gguf_o200k_tok");
  std::ofstream(dir.path + "/tokenizer.json") << R"json({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
    "merges": ["a b"]}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}})json";
  EXPECT_EQ(read_gguf_vocab(dir.path, 3).pre, "gpt-4o");
  const auto t = HfBpeTokenizer::from_tokenizer_json(dir.path + "/tokenizer.json", nlohmann::json::object());
  EXPECT_EQ(t->encode("ab"), (std::vector<int32_t>{2}));
  EXPECT_EQ(t->encode("ba"), (std::vector<int32_t>{1, 0}));
}

TEST(GgufVocab, UnsupportedTokenizersAreRefused) {
  const std::string dir = test::temp_path("gguf_no_tok");
  fs::create_directories(dir);
  expect_error([&] { read_gguf_vocab(dir, 10); }, "GGUF export needs tokenizer.json");
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
    "merges": ["a b"]}, "pre_tokenizer": {"type": "Whitespace"}})";
  expect_error([&] { read_gguf_vocab(dir, 3); }, "pre-tokenizer 'Whitespace'");
  std::ofstream(dir + "/tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
    "merges": ["a b"]}, "pre_tokenizer": {"type": "ByteLevel"}})";
  expect_error([&] { read_gguf_vocab(dir, 2); }, "3 tokens but config.json's vocab_size is 2");
  EXPECT_EQ(read_gguf_vocab(dir, 4).tokens, (std::vector<std::string>{"a", "b", "ab", "[PAD3]"}));
  fs::remove_all(dir);
}
