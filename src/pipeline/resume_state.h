// The durable state of a --resume run: <output>.partial/resume_state.json, written after every block.
// It is untrusted input (the file may be truncated, edited or crafted): parse_resume_state() accepts it
// only when every field is valid for this run, and names the state file in one error otherwise.
//   version       4
//   fingerprint   everything that determines the output (must equal this run's): run_identity
//                 (pipeline/job_identity.h), i.e. the options, every model file by name, size and content
//                 checksum, and the calibration tokens' checksum; a difference is refused naming the field
//   next_block    1 .. num_layers: blocks [0, next_block) are written
//   x_fp / x_q    activation file names, exactly "x_fp.<next_block>.bin" / "x_q.<next_block>.bin" (x_q may
//                 be null): names, not paths, so they can only resolve inside the .partial directory
//   x_fp_hash ... Hash64 (hex) of those files, which must be exactly the activation size
//   outputs       one object per --format entry, in order:
//                   writer  ShardWriter state (validated against its files by ShardWriter::restore)
//                   extra   extra_config so far: keys are Linears of blocks < next_block, values {bits, data_type}
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>
#include <nlohmann/json.hpp>
#include <string>

#include "core/context.h"
#include "core/tensor.h"
#include "export/shard_writer.h"

namespace ar {

struct ResumeExpect {
  nlohmann::ordered_json fingerprint;
  int64_t num_layers = 0;
  size_t outputs = 1;  // --format entries
  // Checks a writer entry against the model: "" when `name` with `shape` is something this run writes
  // (a model tensor with its shape, or the packed form of one of its Linears), else the reason.
  std::function<std::string(const std::string& name, const std::vector<int64_t>& shape)> tensor_check;
};

struct ResumeState {
  struct Output {
    nlohmann::json writer;
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  };
  int64_t next_block = 0;
  std::string x_fp, x_q;            // file names inside the .partial directory (x_q empty: none)
  uint64_t x_fp_hash = 0, x_q_hash = 0;
  std::vector<Output> outputs;
};

// One output's live state: its writer and its extra_config.
struct ResumeOutput {
  ShardWriter* writer;
  nlohmann::ordered_json* extra;
};

// Throws ar::Error (InvalidInput) "<state_path>: corrupt or foreign resume state: <what>".
ResumeState parse_resume_state(const std::string& bytes, const std::string& state_path, const ResumeExpect& expect);
std::string resume_state_json(const ResumeState& s, const nlohmann::ordered_json& fingerprint);
std::string resume_act_name(const char* which, int64_t next_block);  // "x_fp.3.bin"

// The calibration activations of the whole pool as a byte stream in sample order. A single process
// hands over its tensor; a multi-process job's rank 0 streams every rank's shard through it
// (pipeline/shard_stream.h), so the state is the same files whatever the world.
using ActSink = std::function<void(const void* data, size_t bytes)>;
struct ActSource {
  size_t bytes = 0;
  std::function<void(const ActSink&)> produce;  // calls the sink with the pieces in order
  static ActSource of(const Tensor& t);
};

// Saves and restores the state of a run in `dir` (the .partial directory of a resumable AtomicDir).
class ResumeKeeper {
 public:
  ResumeKeeper(std::string dir, ResumeExpect expect) : dir_(std::move(dir)), expect_(std::move(expect)) {}
  // The state with every field validated, or nullopt when there is none. Changes nothing; the
  // activations are checked by read_act, the writers' files by restore_outputs.
  std::optional<ResumeState> load(const std::vector<ResumeOutput>& outputs);
  // Streams an activation file of `state` (x_fp or x_q name) of `bytes` bytes to `sink` in pieces;
  // a size or checksum mismatch is an error (after the pieces went out: callers discard them).
  void read_act(const std::string& name, uint64_t hash, size_t bytes, const ActSink& sink) const;
  // Restores the writers and extra_configs of a loaded state.
  void restore_outputs(const ResumeState& s, const std::vector<ResumeOutput>& outputs);
  // Single process: load + activations into x_fp (and x_q, allocated like x_fp when saved) + outputs.
  // Returns the next block to run, 0 when there is no state.
  int64_t restore(Tensor& x_fp, Tensor& x_q, const std::vector<ResumeOutput>& outputs, Context& ctx);
  // Durable state after `next_block` blocks: activations, writer positions, extra_configs; state file last.
  void save(int64_t next_block, const ActSource& x_fp, const ActSource* x_q, const std::vector<ResumeOutput>& outputs);
  void save(int64_t next_block, const Tensor& x_fp, const Tensor& x_q, const std::vector<ResumeOutput>& outputs);
  // Removes the state and its activations (before the directory becomes the output).
  void discard();

 private:
  std::string state_path() const { return dir_ + "/resume_state.json"; }
  std::string dir_;
  ResumeExpect expect_;
  int64_t last_ = -1;  // next_block of the newest saved state
};

}  // namespace ar
