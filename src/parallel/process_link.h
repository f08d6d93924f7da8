// The other processes of a multi-process job, as the tuning and the pipeline see them (distributed/ implements
// it on Gloo; parallel/ and quant/ never include a transport). Process p of P holds the calibration
// samples of its batch positions (parallel/plan.h); the calls below are collectives: every process makes
// the same calls in the same order.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ar::parallel {

class ProcessLink {
 public:
  virtual ~ProcessLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf[0, n) becomes the sum over processes by the fixed tree sum(a, b) = sum(a, mid) + sum(mid, b),
  // mid = (a + b) / 2, in fp32: the same bits on every process, and for a power-of-two P the top levels
  // of the serial run's tree over batch positions.
  virtual void sum_tree(float* buf, int64_t n) = 0;
  virtual double sum_tree(double v) = 0;  // the same tree, in double
  // out[size() * bytes]: every process's `in`, in rank order.
  virtual void allgather(const void* in, size_t bytes, void* out) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // Point to point, in order per pair (resume state streaming).
  virtual void send(const void* buf, size_t bytes, int dst) = 0;
  virtual void recv(void* buf, size_t bytes, int src) = 0;
  virtual int64_t bytes_received() const = 0;  // from other processes, since the start
};

// Process p's share of a batch of B positions over P processes: positions [B p / P, B (p + 1) / P), whose
// pool samples are [S(B p / P), S(B (p + 1) / P)) with S(j) = j n / B (the stratified sampler's strata).
struct ProcessShard {
  int64_t pos_begin = 0, pos_end = 0;        // batch positions
  int64_t sample_begin = 0, sample_end = 0;  // pool samples held by this process
  int64_t samples() const { return sample_end - sample_begin; }
};
inline ProcessShard process_shard(int64_t n, int64_t B, int p, int P) {
  ProcessShard s;
  s.pos_begin = B * p / P;
  s.pos_end = B * (p + 1) / P;
  s.sample_begin = s.pos_begin * n / B;
  s.sample_end = s.pos_end * n / B;
  return s;
}

}  // namespace ar::parallel
