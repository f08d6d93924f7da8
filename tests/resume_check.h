// A --resume run interrupted and resumed must write what an uninterrupted run writes: `o` is run into
// o.output_dir (the reference), then with --resume into `q`, SIGKILLed once block 1 is checkpointed
// (kill_after_block.h), and resumed; every listed output subdirectory's model.safetensors, config.json
// and quantization_config.json must be byte-identical to the reference's, and the resumed run must not redo finished
// blocks (fewer than `blocks` reported).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "kill_after_block.h"
#include "pipeline/quantize.h"

namespace ar::test {

inline void expect_resume_matches_uninterrupted(QuantizeOptions o, const std::string& q, size_t blocks,
                                                const std::vector<std::string>& subdirs) {
  const std::string ref = o.output_dir;
  quantize_model(o);
  o.output_dir = q;
  o.resume = true;
  ASSERT_TRUE(kill_after_block_one([&] { quantize_model(o); }, q + ".partial/resume_state.json"))
      << "the child finished before it could be killed";
  const QuantizeReport r = quantize_model(o);
  EXPECT_LT(r.blocks.size(), blocks);  // finished blocks were not redone
  for (const auto& sub : subdirs) {
    EXPECT_EQ(read_text_file(q + sub + "/model.safetensors"), read_text_file(ref + sub + "/model.safetensors")) << sub;
    EXPECT_EQ(read_text_file(q + sub + "/config.json"), read_text_file(ref + sub + "/config.json")) << sub;
    EXPECT_EQ(read_text_file(q + sub + "/quantization_config.json"),
              read_text_file(ref + sub + "/quantization_config.json"))
        << sub;
  }
}

}  // namespace ar::test
