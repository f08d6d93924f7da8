// The float schemes the tuning and pipeline tests run (AutoRound's presets with the test models'
// widths: FP8_BLOCK's 128 x 128 tiles shrink to 32 x 32 so a weight has several in both directions).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "model/loader.h"
#include "quant/signround.h"

namespace ar::test {

inline quant::QuantFormat fp_format(quant::FpFamily fam, int bits, int64_t group, int64_t block_rows = 0) {
  quant::QuantFormat f(bits, group, true);
  f.fp = fam;
  f.block_rows = block_rows;
  return f;
}

// FP8_STATIC: FP8 weights per channel, static E4M3 activation scales (W8A8).
inline quant::QuantFormat fp8_static_format() {
  quant::QuantFormat f = fp_format(quant::FpFamily::Fp8, 8, -1);
  f.act_bits = 8;
  return f;
}

struct FpScheme {
  const char* name;
  quant::QuantFormat fmt;
};

inline const FpScheme kFpSchemes[] = {
    {"MXFP4", fp_format(quant::FpFamily::Mx, 4, 32)},   {"MXFP4_RCEIL", fp_format(quant::FpFamily::MxRceil, 4, 32)},
    {"MXFP8", fp_format(quant::FpFamily::Mx, 8, 32)},   {"NVFP4", fp_format(quant::FpFamily::Nvfp4, 4, 16)},
    {"FPW8A16", fp_format(quant::FpFamily::Fp8, 8, 0)}, {"FP8_CHANNEL", fp_format(quant::FpFamily::Fp8, 8, -1)},
    {"FP8_BLOCK32", fp_format(quant::FpFamily::Fp8, 8, 32, 32)},
};

// Two float-scheme outputs of one run (auto_round and llm_compressor) read back to the same Linears, bit
// for bit, in each of the first `layers` blocks (`linears` per block).
inline void expect_same_linears(const std::string& a_dir, const std::string& b_dir, int64_t layers, size_t linears) {
  auto a = HfModel::open(a_dir), b = HfModel::open(b_dir);
  Context ctx(Device{}, 2);
  for (int64_t l = 0; l < layers; ++l) {
    const BlockWeights wa = a->load_block(l, ctx), wb = b->load_block(l, ctx);
    const auto la = quant::block_linears(wa), lb = quant::block_linears(wb);
    ASSERT_EQ(la.size(), linears);
    for (size_t i = 0; i < la.size(); ++i)
      for (int64_t j = 0; j < la[i].second->numel(); ++j)
        ASSERT_EQ(la[i].second->f32()[j], lb[i].second->f32()[j]) << la[i].first << " [" << j << "]";
  }
}

}  // namespace ar::test
