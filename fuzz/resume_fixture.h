// The fixed run that the resume-state fuzz target checks states against, shared with make_seeds so
// that the generated seed is a valid state of exactly this run: the fingerprint, the layer count,
// and a .partial directory whose ShardWriter holds one closed shard and one open data file.
#pragma once
#include <filesystem>
#include <string>

#include "core/context.h"
#include "export/shard_writer.h"
#include "pipeline/resume_state.h"

namespace ar::fuzz {

inline ResumeExpect resume_expect() {
  ResumeExpect e;
  e.fingerprint = {{"options", {{"format", "auto_round"}, {"bits", 4}, {"group_size", 32}}},
                   {"model", {{"config.json", {{"bytes", 512}, {"hash", "0123456789abcdef"}}},
                              {"model.safetensors", {{"bytes", 4096}, {"hash", "fedcba9876543210"}}}}},
                   {"calibration", {{"n", 8}, {"seqlen", 64}, {"tokens_hash", "00000000deadbeef"}}}};  // run_identity's shape
  e.num_layers = 4;
  return e;
}

// (Re)creates `dir` with the shard files of a writer that received three small tensors, and returns
// the writer's state. Deterministic: the same files and state on every call.
inline nlohmann::json make_partial_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  Context ctx({}, 1);
  ShardWriter w(dir, 64);  // 64-byte shards: the second tensor closes the first shard
  w.keep_files();          // a resumable run's writer
  for (int i = 0; i < 3; ++i) {
    Tensor t = Tensor::zeros({2, 4}, DType::F32, ctx);
    t.f32()[i] = float(i + 1);
    w.add("model.layers.0.mlp.w" + std::to_string(i) + ".weight", t);
  }
  return w.checkpoint();
}

}  // namespace ar::fuzz
