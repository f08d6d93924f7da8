// The calibration activations of a multi-process job live in shards, one per process (process p holds
// pool samples parallel::process_shard(n, B, p, P)); the resume state holds them as one file in sample
// order, written and read by rank 0 only. These move a shard to and from rank 0 in pieces of at most
// 16 MiB (no rank ever holds more than its shard plus one piece):
//   save:    rank 0 gather(mine) -> an ActSource producing every shard in rank order; others send(mine).
//   restore: rank 0 scatter(mine) -> an ActSink that keeps its own bytes and sends the others theirs;
//            others receive(mine).
// Every rank must make the matching call for the same tensor, in the same order.
#pragma once
#include <vector>

#include "parallel/process_link.h"
#include "pipeline/resume_state.h"

namespace ar {

class ShardStream {
 public:
  // shard_bytes[q]: the bytes of process q's shard of this tensor.
  ShardStream(parallel::ProcessLink& link, std::vector<size_t> shard_bytes);
  ActSource gather(const Tensor& mine);
  void send(const Tensor& mine);
  ActSink scatter(Tensor& mine);
  void receive(Tensor& mine);

 private:
  parallel::ProcessLink& link_;
  std::vector<size_t> bytes_;
};

}  // namespace ar
