// parallel::ProcessLink on Gloo's TCP transport: the processes of a job as one group. Only distributed/ sees Gloo.
//   sum_tree: in pieces of 16 Mi floats, an alltoall hands process c the c-th chunk of every process's
//     piece, process c sums its chunk over the processes by the fixed tree (process-order leaves, so
//     every process and every run gets the same bits), and an allgather returns the summed chunks:
//     per process and piece (P-1)/P of it in and out twice, like a ring allreduce, with none of a
//     ring's timing-dependent order.
// Every collective runs under the job's collective timeout; a Gloo failure (a peer gone, a timeout)
// becomes an ar::Error (Io) naming the operation and, when the liveness link already knows it, the
// lost rank (`explain`).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/process_link.h"

namespace gloo {
class Context;
}

namespace ar::dist {

class GlooProcessGroup : public parallel::ProcessLink {
 public:
  // explain(operation, gloo's message) -> the error message (may wait briefly for the liveness verdict).
  GlooProcessGroup(std::shared_ptr<gloo::Context> ctx,
                   std::function<std::string(const std::string&, const std::string&)> explain);
  ~GlooProcessGroup() override;
  int rank() const override;
  int size() const override;
  void sum_tree(float* buf, int64_t n) override;
  double sum_tree(double v) override;
  void allgather(const void* in, size_t bytes, void* out) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void send(const void* buf, size_t bytes, int dst) override;
  void recv(void* buf, size_t bytes, int src) override;
  int64_t bytes_received() const override { return received_; }

 private:
  template <class F>
  void guarded(const char* op, F&& f);
  void sum_piece(float* buf, int64_t n);
  std::shared_ptr<gloo::Context> ctx_;
  std::function<std::string(const std::string&, const std::string&)> explain_;
  int64_t received_ = 0;
  std::vector<float> pad_, theirs_, mine_;  // sum_tree scratch, reused across iterations
};

// Sums rows [0, rows) of `in` (each `len` values, rank order) by the fixed tree into out[0, len).
template <class T>
void tree_sum_rows(const T* in, int64_t len, int rows, T* out);

}  // namespace ar::dist
