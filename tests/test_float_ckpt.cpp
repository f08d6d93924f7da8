// Float-scheme checkpoints written by AutoRound 0.16.1 (tests/data/float_ckpt, made by
// tools/make_float_ckpt_goldens.py): the loader reads every Linear to exactly the weights transformers
// reads from the same files (compressed-tensors decompression); and a lying file is refused naming the
// tensor.
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/float_ckpt/";
const char* kCases[] = {"mxfp4_llm_compressor",      "mxfp8_llm_compressor",   "nvfp4_llm_compressor",
                        "nvfp4_auto_round",          "fp8_static_llm_compressor", "fp8_static_auto_round",
                        "fp8_block_llm_compressor"};

using test::error_of;

// A copy of a case with one tensor of model.safetensors replaced by `edit` (given its raw bytes).
std::string edited_copy(const std::string& c, const std::string& tensor,
                        const std::function<void(StTensorInfo&, std::vector<uint8_t>&)>& edit) {
  const std::string d = test::temp_path("float_ckpt_" + c);
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(kDir + c + "/config.json", d + "/config.json");
  auto f = SafetensorsFile::open(kDir + c + "/model.safetensors");
  Context ctx(Device{}, 1);
  std::vector<StEntry> out;
  for (StTensorInfo t : f->header().tensors) {
    std::vector<uint8_t> b(f->bytes(t), f->bytes(t) + (t.end - t.begin));
    if (t.name == tensor) edit(t, b);
    Tensor x = Tensor::empty(t.shape, t.dtype, ctx);
    EXPECT_EQ(size_t(x.nbytes()), b.size()) << t.name;
    std::memcpy(x.raw(), b.data(), std::min(size_t(x.nbytes()), b.size()));
    out.push_back({t.name, std::move(x)});
  }
  write_safetensors(d + "/model.safetensors", out);
  return d;
}

}  // namespace

TEST(FloatCheckpoint, ReadsWhatTransformersReads) {
  Context ctx(Device{}, 2);
  for (const char* c : kCases) {
    SCOPED_TRACE(c);
    auto m = HfModel::open(kDir + c);
    auto want = SafetensorsFile::open(kDir + c + "/expected.safetensors");
    int quantized = 0;
    for (const StTensorInfo& t : want->header().tensors) {
      const std::string prefix = t.name.substr(0, t.name.size() - 7);  // without ".weight"
      const StTensorInfo* stored = m->info(t.name);
      quantized += m->has(prefix + ".weight_packed") || (stored && stored->dtype == DType::F8E4M3);
      Tensor got = m->load(t.name, t.shape, ctx);
      Tensor exp = want->load_f32(t.name, ctx);
      ASSERT_EQ(got.numel(), exp.numel()) << t.name;
      int bad = 0;
      for (int64_t i = 0; i < got.numel(); ++i)
        if (got.f32()[i] != exp.f32()[i] && ++bad <= 3)
          ADD_FAILURE() << t.name << "[" << i << "] = " << got.f32()[i] << ", transformers reads " << exp.f32()[i];
      EXPECT_EQ(bad, 0) << t.name;
    }
    EXPECT_GE(quantized, 7) << "the float path was not taken";
  }
}

TEST(FloatCheckpoint, RefusesLyingFilesNamingTheTensor) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  // A scale of the wrong dtype (E8M0 bytes where NVFP4 keeps e4m3).
  std::string d = edited_copy("nvfp4_llm_compressor", q + ".weight_scale", [](StTensorInfo& t, auto&) { t.dtype = DType::U8; });
  EXPECT_NE(error_of([&] { HfModel::open(d); }).find("tensor '" + q + ".weight_scale' has dtype U8; NVFP4 stores it as F8_E4M3"),
            std::string::npos) << error_of([&] { HfModel::open(d); });
  // An E8M0 scale of 255 (NaN): refused when the weight is read, naming the Linear.
  d = edited_copy("mxfp4_llm_compressor", q + ".weight_scale", [](StTensorInfo&, std::vector<uint8_t>& b) { b[3] = 0xFF; });
  auto m = HfModel::open(d);
  Context ctx(Device{}, 1);
  EXPECT_NE(error_of([&] { m->load(q + ".weight", {64, 64}, ctx); }).find("MXFP4 Linear '" + q + "' dequantizes to a non-finite value at element 96"),
            std::string::npos) << error_of([&] { m->load(q + ".weight", {64, 64}, ctx); });
  // A packed weight of the wrong shape.
  d = edited_copy("mxfp4_llm_compressor", q + ".weight_packed", [](StTensorInfo& t, std::vector<uint8_t>& b) {
    t.shape = {32, 64};
    (void)b;
  });
  EXPECT_NE(error_of([&] { HfModel::open(d); }).find("tensor '" + q + ".weight_packed' has shape [32, 64], expected [64, 32]"),
            std::string::npos) << error_of([&] { HfModel::open(d); });
  // A format this loader does not read.
  d = edited_copy("fp8_static_llm_compressor", "", [](StTensorInfo&, auto&) {});
  auto cfg = nlohmann::json::parse(read_text_file(d + "/config.json"));
  cfg["quantization_config"]["format"] = "pack-quantized";
  { std::ofstream(d + "/config.json") << cfg.dump(); }
  EXPECT_NE(error_of([&] { HfModel::open(d); }).find("field 'quantization_config.format': 'pack-quantized' is not supported"),
            std::string::npos) << error_of([&] { HfModel::open(d); });
  m.reset();
  for (const char* c : {"nvfp4_llm_compressor", "mxfp4_llm_compressor", "fp8_static_llm_compressor"})
    fs::remove_all(test::temp_path(std::string("float_ckpt_") + c));
}
