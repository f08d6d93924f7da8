// Fuzz target: a float-scheme checkpoint's model.safetensors (model/dequant_float.cpp through
// HfModel::open and load). Byte 0 picks one of the committed tests/data/float_ckpt configurations
// (MXFP4, MXFP8, NVFP4, FP8 per channel / block, AutoRound's packings) or gpt-oss's MXFP4 release
// (tests/data/gpt_oss/mxfp4: model/mxfp4_experts.cpp); the rest is the safetensors image. Every Linear of the block and lm_head is read, so the part checks and the dequantization
// both run, and (FP8_STATIC) the Linears' static activation scales.
#include <filesystem>

#include "core/context.h"
#include "fuzz_util.h"
#include "io/mapped_file.h"
#include "model/dequant_float.h"
#include "model/loader.h"

namespace {
// Configuration directories under tests/data (byte 0's order: make_seeds.cpp writes the seeds in it).
const char* kCases[] = {"float_ckpt/mxfp4_llm_compressor",      "float_ckpt/mxfp8_llm_compressor",
                        "float_ckpt/nvfp4_llm_compressor",      "float_ckpt/nvfp4_auto_round",
                        "float_ckpt/fp8_static_llm_compressor", "float_ckpt/fp8_static_auto_round",
                        "float_ckpt/fp8_block_llm_compressor",  "gpt_oss/mxfp4/model"};
constexpr size_t kN = sizeof kCases / sizeof kCases[0];

// Once per process: <scratch>/float_ckpt_<i>/config.json for every case.
const std::string& case_dir(size_t i) {
  static const std::vector<std::string> dirs = [] {
    std::vector<std::string> d;
    for (size_t k = 0; k < kN; ++k) {
      const std::string dir = ar::fuzz::scratch_dir() + "/float_ckpt_" + std::to_string(k);
      std::filesystem::create_directories(dir);
      const std::string cfg =
          ar::read_text_file(std::string(AR_SOURCE_DIR) + "/tests/data/" + kCases[k] + "/config.json");
      ar::fuzz::write_file(dir + "/config.json", reinterpret_cast<const uint8_t*>(cfg.data()), cfg.size());
      d.push_back(dir);
    }
    return d;
  }();
  return dirs[i];
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& dir = case_dir(data[0] % kN);
  return ar::fuzz::guarded([&] {
    ar::fuzz::write_file(dir + "/model.safetensors", data + 1, size - 1);
    auto m = ar::HfModel::open(dir);
    ar::Context ctx({}, 1);
    (void)m->load_block(0, ctx);
    (void)m->load_lm_head(ctx);
    (void)ar::block_input_scales(*m, 0);
    const ar::ModelConfig& c = m->config();
    (void)ar::static_input_scale(*m, "lm_head", {c.vocab_size, c.hidden_size});
  });
}
