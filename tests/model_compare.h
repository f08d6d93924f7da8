// Two checkpoints compared through our inference path, for the pipeline tests: the KL of a quantized
// model to its FP model on a fixed English sentence (the synthetic models' byte tokenizer), and whether two
// models give bit-identical logits for a fixed id sequence.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "eval/perplexity.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace ar::test {

inline double kl_to(const std::string& fp_dir, const std::string& q_dir) {
  Context ctx(Device{}, 2);
  auto fp = HfModel::open(fp_dir), q = HfModel::open(q_dir);
  const std::vector<int32_t> ids = load_tokenizer(*fp)->encode(
      "The river had changed its course over the years, and the old plans no longer matched the land.");
  Transformer tf(*fp, ctx, false), tq(*q, ctx, false);
  return compare_models(tq, tf, ids, 32, 1).kl_mean;
}

inline void expect_same_logits(const std::string& a_dir, const std::string& b_dir) {
  Context ctx(Device{}, 2);
  auto a = HfModel::open(a_dir), b = HfModel::open(b_dir);
  const std::vector<int32_t> ids = {1, 5, 9, 13, 2, 7, 11, 3};
  Transformer ta(*a, ctx, false), tb(*b, ctx, false);
  const Tensor la = ta.forward_logits(ids.data(), nullptr, 1, 8), lb = tb.forward_logits(ids.data(), nullptr, 1, 8);
  EXPECT_EQ(0, std::memcmp(la.f32(), lb.f32(), la.nbytes())) << a_dir << " and " << b_dir << " give different logits";
}

}  // namespace ar::test
