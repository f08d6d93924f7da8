// What the GGUF family tests (test_gguf_families.cpp, test_gguf_delta_net.cpp) check of every family: the
// file in an output directory, its blocks read back equal to the fake companion's, the data-parallel lane's
// file equal to the serial one, a refusal before anything is written, a file edit refused at open.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/quantize.h"
#include "quantize_options.h"
#include "test_util.h"

namespace ar::test {

inline std::string gguf_file_in(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".gguf") return e.path().string();
  return {};
}

// Every block tensor of the GGUF model equals the fake companion's: Linears to fp16 (fake writes the file's
// dequantized values in fp16), the rest exactly, or within 1e-6 relative for the tensors in `near` (values
// the file holds transformed, e.g. A_log as -exp(A_log)).
inline void expect_blocks_equal_fake(const HfModel& gguf, const HfModel& fake, const std::string& label,
                                     const std::set<std::string>& near = {}) {
  Context ctx(Device{}, 2);
  for (int64_t l = 0; l < gguf.config().num_layers; ++l) {
    const BlockWeights wa = gguf.load_block(l, ctx), wb = fake.load_block(l, ctx);
    ASSERT_EQ(wa.tensors.size(), wb.tensors.size()) << label;
    for (size_t k = 0; k < wa.tensors.size(); ++k) {
      const Tensor &a = wa.tensors[k].in(wa), &b = wb.tensors[k].in(wb);
      const std::string& name = wa.tensors[k].name;
      const bool half = wa.tensors[k].role == TensorRole::Linear;
      const bool close = near.count(name) > 0;
      for (int64_t i = 0; i < a.numel(); ++i) {
        const float want = half ? f16_to_f32(f32_to_f16(a.f32()[i])) : a.f32()[i];
        if (close) {
          ASSERT_NEAR(want, b.f32()[i], 1e-6f * (1 + std::abs(b.f32()[i]))) << label << " layer " << l << " " << name;
        } else {
          ASSERT_EQ(want, b.f32()[i]) << label << " layer " << l << " " << name << " [" << i << "]";
        }
      }
    }
  }
}

// The run `o` again on two CPU devices of the data-parallel lane writes `file`'s bytes.
inline void expect_world2_writes_the_same_file(QuantizeOptions o, const std::string& file, const std::string& subdir) {
  TempDir q2("gguf_world2");
  o.output_dir = q2.path;
  o.parallel = parallel::ParallelSetting::parse("2");
  o.devices = "cpu:0,cpu:1";
  quantize_model(o);
  EXPECT_TRUE(read_text_file(gguf_file_in(q2.path + "/" + subdir)) == read_text_file(file)) << "world 2";
}

// A GGUF run of the model `cfg` is refused naming `why`, and no output directory is left.
inline void expect_gguf_refused_before_writing(const nlohmann::json& cfg, const std::string& why, uint64_t seed) {
  TempDir m("gguf_refuse_m");
  const std::string q = temp_path("gguf_refuse_q");
  write_synthetic_model(m.path, cfg, seed);
  auto o = moe_quantize_options(m.path, q, 0);
  o.format = "gguf:q4_k_m";
  o.overwrite = false;
  EXPECT_NE(error_of([&] { quantize_model(o); }).find(why), std::string::npos) << why;
  EXPECT_FALSE(std::filesystem::exists(q)) << why;
}

// `file` with the bytes `from` replaced once by `to` (the same length, so it stays well formed) is refused
// at open as Unsupported, naming `why`.
inline void expect_edited_file_refused(const std::string& file, const std::string& from, const std::string& to,
                                       const std::string& why) {
  std::string bytes = read_text_file(file);
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << why;
  ASSERT_EQ(from.size(), to.size()) << why;
  bytes.replace(at, from.size(), to);
  TempDir t("gguf_edit");
  write_file_atomic(t.path + "/edited.gguf", bytes);
  try {
    open_model(t.path + "/edited.gguf");
    ADD_FAILURE() << "accepted: " << why;
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Unsupported) << err.what();
    EXPECT_NE(std::string(err.what()).find(why), std::string::npos) << err.what();
  }
}

}  // namespace ar::test
