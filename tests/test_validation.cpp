// Library-level validation rules behind the bad-input table (docs/reliability.md): the safetensors
// overlap rule at its edges, unique JSON keys at any depth, config size limits at their bounds, the
// tokenizer/vocab check at its boundary, NaN/Inf scans of BF16/F16 storage, strict --dataset specs,
// option limits and the thread cap of the library entry points.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/context.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_unique.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "pipeline/run_steps.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/option_limits.h"
#include "pipeline/quantize.h"
#include "quant/calib.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
std::string image(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  return s + header + std::string(data_bytes, '\0');
}
// "" if the image parses, else the error.
std::string st_error(const std::string& header, size_t data_bytes) {
  const std::string img = image(header, data_bytes);
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
std::string entry(const char* name, int64_t n, size_t b) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(b + size_t(n) * 4) + "]}";
}
using test::error_of;
}  // namespace

TEST(Validation, ZeroSizeTensorsMaySitAtBoundariesButNotInside) {
  EXPECT_EQ(st_error("{" + entry("a", 4, 0) + "," + entry("z", 0, 0) + "," + entry("y", 0, 0) + "}", 16), "");
  EXPECT_EQ(st_error("{" + entry("a", 4, 0) + "," + entry("z", 0, 16) + "}", 16), "");  // at the end
  EXPECT_EQ(st_error("{" + entry("a", 2, 0) + "," + entry("z", 0, 8) + "," + entry("b", 2, 8) + "}", 16), "");
  EXPECT_NE(st_error("{" + entry("a", 4, 0) + "," + entry("z", 0, 4) + "}", 16).find("'a' and 'z' overlap"),
            std::string::npos);
  // A zero-size tensor sorted between a long tensor and one inside it must not hide the overlap.
  EXPECT_NE(st_error("{" + entry("a", 4, 0) + "," + entry("z", 0, 0) + "," + entry("c", 1, 8) + "}", 16)
                .find("'a' and 'c' overlap"),
            std::string::npos);
  EXPECT_NE(st_error("{" + entry("z", 0, 20) + "}", 16).find("truncated"), std::string::npos);
}

TEST(Validation, DuplicateKeysRefusedAtAnyDepth) {
  auto parse = [](const std::string& s) {
    return error_of([&] { parse_json_unique(s.data(), s.data() + s.size(), "f.json", "field"); });
  };
  EXPECT_EQ(parse(R"({"a":{"x":1},"b":{"x":2}})"), "");  // equal keys in different objects are fine
  EXPECT_EQ(parse(R"({"a":1,"a":2})"), "f.json: field 'a' appears twice");
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","dtype":"I32"}})"), "f.json: key 'dtype' appears twice");
  EXPECT_EQ(parse(R"([{"k":1},{"k":1,"k":2}])"), "f.json: key 'k' appears twice");
  EXPECT_NE(parse("{").find("f.json: not valid JSON"), std::string::npos);
}

TEST(Validation, ConfigLimitsAtTheirBounds) {
  nlohmann::json c = tiny_llama_config(1);
  c["vocab_size"] = int64_t(1) << 24;
  EXPECT_EQ(error_of([&] { parse_model_config(c, "c.json"); }), "");
  c["vocab_size"] = (int64_t(1) << 24) + 1;
  EXPECT_EQ(error_of([&] { parse_model_config(c, "c.json"); }),
            "c.json: field 'vocab_size': 16777217 exceeds the limit of 16777216 (a model this size would need absurd "
            "memory)");
  c = tiny_llama_config(1);
  c["num_hidden_layers"] = 4096;
  EXPECT_EQ(error_of([&] { parse_model_config(c, "c.json"); }), "");
  c["num_hidden_layers"] = 4097;
  EXPECT_NE(error_of([&] { parse_model_config(c, "c.json"); }).find("field 'num_hidden_layers'"), std::string::npos);
  c = tiny_llama_config(1);
  c["max_position_embeddings"] = 1 << 24;
  c["head_dim"] = 4096;
  EXPECT_NE(error_of([&] { parse_model_config(c, "c.json"); }).find("field 'max_position_embeddings': implies"),
            std::string::npos);
}

TEST(Validation, TokenizerMayFillButNotExceedTheVocabulary) {
  const std::string d = test::temp_path("val_tok");
  write_synthetic_model(d, tiny_llama_config(1), 3);
  auto m = HfModel::open(d);
  EXPECT_EQ(load_tokenizer(*m)->vocab_size(), 300);  // exactly vocab_size ids: fine
  write_byte_tokenizer(d + "/tokenizer.bin", 301);
  EXPECT_NE(error_of([&] { load_tokenizer(*m); }).find("the tokenizer has 301 tokens (ids up to 300)"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(Validation, TensorHeldByTwoShardsIsRefused) {
  const std::string d = test::temp_path("val_shards");
  write_synthetic_model(d, tiny_llama_config(1), 3, DType::F32, 2);
  ASSERT_NO_THROW(HfModel::open(d));
  const std::string s1 = d + "/model-00001-of-00002.safetensors", s2 = d + "/model-00002-of-00002.safetensors";
  Context ctx(Device{}, 1);
  std::vector<StEntry> second;
  {
    auto f2 = SafetensorsFile::open(s2);
    for (const auto& t : f2->header().tensors) second.push_back({t.name, f2->load_f32(t.name, ctx)});
    auto f1 = SafetensorsFile::open(s1);
    const std::string& name = f1->header().tensors.front().name;
    second.push_back({name, f1->load_f32(name, ctx)});
  }
  write_safetensors(s2, second);
  const std::string err = error_of([&] { HfModel::open(d); });
  // Shards are opened in the index's order; either file may be named first.
  EXPECT_NE(err.find("' is also in "), std::string::npos) << err;
  EXPECT_NE(err.find(s1), std::string::npos) << err;
  EXPECT_NE(err.find(s2), std::string::npos) << err;
  fs::remove_all(d);
}

TEST(Validation, NonFiniteValuesFoundInHalfPrecisionStorage) {
  for (DType dt : {DType::BF16, DType::F16}) {
    const std::string d = test::temp_path("val_half");
    write_synthetic_model(d, tiny_llama_config(1), 3, dt);
    EXPECT_NO_THROW(HfModel::open(d));
    const std::string path = d + "/model.safetensors";
    size_t off = 0;
    {
      auto f = SafetensorsFile::open(path);
      off = f->header().data_start + f->find("model.layers.0.post_attention_layernorm.weight")->begin + 2 * 5;
    }
    std::string bytes = read_text_file(path);
    const uint16_t inf = dt == DType::BF16 ? 0x7f80 : 0x7c00;  // +Inf in each format
    std::memcpy(bytes.data() + off, &inf, 2);
    { std::FILE* fp = std::fopen(path.c_str(), "wb"); std::fwrite(bytes.data(), 1, bytes.size(), fp); std::fclose(fp); }
    EXPECT_NE(error_of([&] { HfModel::open(d); })
                  .find("tensor model.layers.0.post_attention_layernorm.weight: non-finite value inf at element 5 of 64"),
              std::string::npos)
        << dtype_safetensors_name(dt);
    fs::remove_all(d);
  }
}

TEST(Validation, DatasetSpecsParsedStrictly) {
  auto s = quant::parse_dataset_spec("a.txt:num=3:concat=true,b.jsonl:field=body:concat=0");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].path, "a.txt");
  EXPECT_EQ(s[0].num, 3);
  EXPECT_TRUE(s[0].concat.value_or(false));
  EXPECT_EQ(s[1].field, "body");
  EXPECT_FALSE(s[1].concat.value_or(true));
  EXPECT_EQ(s[1].num, -1);
  EXPECT_EQ(error_of([] { quant::parse_dataset_spec("a.txt:num=1048577"); }),
            "--dataset 'a.txt:num=1048577': :num=1048577 is out of range (1 to 1048576)");
  EXPECT_EQ(error_of([] { quant::parse_dataset_spec("a.txt:num=+3"); }),
            "--dataset 'a.txt:num=+3': :num= '+3' is not a whole number");
  EXPECT_NE(error_of([] { quant::parse_dataset_spec("a.txt:num=2:"); }).find("ends with an empty sub-option"),
            std::string::npos);
  EXPECT_NE(error_of([] { quant::parse_dataset_spec("a.txt:concat"); }).find("'concat' is not key=value"),
            std::string::npos);
  EXPECT_EQ(error_of([] { quant::parse_dataset_spec(""); }), "--dataset '' names no source");
  for (const char* spec : {",", "a.txt,,b.txt", "a.txt,", ",a.txt"})
    EXPECT_EQ(error_of([&] { quant::parse_dataset_spec(spec); }),
              "--dataset '" + std::string(spec) + "' has an empty entry (two commas, or one at either end)")
        << spec;
}

TEST(Validation, LibraryEntryPointsRefuseBadCounts) {
  QuantizeOptions o;
  EXPECT_EQ(error_of([&] { validate_quantize_options(o); }), "");  // defaults are valid
  auto bad = [&](auto&& set) {
    QuantizeOptions q;
    set(q);
    return error_of([&] { validate_quantize_options(q); });
  };
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.tune.batch_size = 0; }), "--batch_size 0 is out of range (1 to 65536)");
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.tune.iters = -1; }), "--iters -1 is out of range (0 to 1000000)");
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.threads = 100000; }), "--threads 100000 is out of range (0 to 1024)");
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.tune.gradient_accumulate_steps = 0; }),
            "--gradient_accumulate_steps 0 is out of range (1 to 65536)");
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.fmt.group_size = 0; }), "--group_size 0 is not supported (-1 or > 0)");
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.tune.lr = -1; }), "--lr -1 is out of range (0 to 1e+06)");
  EXPECT_NE(bad([](QuantizeOptions& q) { q.tune.minmax_lr = std::nan(""); }).find("--minmax_lr nan"),
            std::string::npos);
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.tune.lr = 1e308; }), "--lr 1e+308 is out of range (0 to 1e+06)");
  EXPECT_EQ(bad([](QuantizeOptions& q) { q.tune.lr = kMaxRate; }), "");
  // --seed: every 64-bit value and nothing past it
  EXPECT_EQ(check_seed_text("0"), "");
  EXPECT_EQ(check_seed_text("18446744073709551615"), "");
  EXPECT_EQ(check_seed_text("18446744073709551616"), "18446744073709551616 is out of range (0 to 2^64-1)");
  EXPECT_EQ(check_seed_text("-0"), "-0 is out of range (0 to 2^64-1)");
  EXPECT_EQ(check_seed_text(""), "'' is not an integer (0 to 2^64-1)");
  EXPECT_EQ(check_seed_text("+5"), "+5 is not an integer (0 to 2^64-1)");
  // quantize_model checks before touching the model or the output.
  QuantizeOptions q;
  q.model_dir = "/nonexistent_model";
  q.output_dir = test::temp_path("val_out");
  q.tune.batch_size = 0;
  EXPECT_EQ(error_of([&] { quantize_model(q); }), "--batch_size 0 is out of range (1 to 65536)");
  EXPECT_FALSE(fs::exists(q.output_dir));
  EXPECT_NE(error_of([] { Context c(Device{}, 1025); }).find("threads 1025 exceeds the limit of 1024"),
            std::string::npos);
  EXPECT_NE(error_of([] { ThreadPool p(5000); }).find("5000 threads exceeds the limit of 1024"), std::string::npos);
  EXPECT_EQ(Context(Device{}, 1024).threads(), 1024);  // the bound itself is allowed
}

// A resume keeps the tuning's device: its identity says where the blocks were tuned (a GPU's GEMMs sum
// in another order).
TEST(Validation, RunIdentityNamesTheTuningDevice) {
  ar::QuantizeOptions cpu, gpu, gpu32;
  gpu.cuda_device = gpu32.cuda_device = 0;
  gpu32.amp = false;
  const ar::quant::CalibData calib;
  EXPECT_EQ(ar::steps::run_fingerprint(cpu, calib, false, 1)["tuned_on"], "cpu");
  EXPECT_EQ(ar::steps::run_fingerprint(gpu, calib, false, 1)["tuned_on"], "cuda amp");
  EXPECT_EQ(ar::steps::run_fingerprint(gpu32, calib, false, 1)["tuned_on"], "cuda");
}
