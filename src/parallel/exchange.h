// The per-iteration gradient exchange of the data-parallel lane, in one address space.
// Every rank holds a partial gradient (a flat fp32 buffer it owns and registers); the flat index range
// is cut into `world` chunks, rank r owning chunk r.
//   reduce_scatter(r): rank r sums chunk r over all ranks' partials with a fixed binary tree over the
//     ranks (sum(a, b) = sum(a, mid) + sum(mid, b), mid = (a + b) / 2), so the bits do not depend on
//     timing; Sign mode stores int8 sign(sum) of the chunk, Values mode the fp32 sum.
//   all_gather(r): rank r copies every other rank's result chunk into its own result buffer.
// Both phases run on all ranks in parallel (no single-thread reduction). Per rank and iteration the
// reduce-scatter reads (W-1)/W of the buffer in fp32 and the gather (W-1)/W in int8 (Sign) or fp32.
// A non-finite partial stops the exchange with an error naming the replica it came from.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace ar::parallel {

class GradExchange {
 public:
  enum class Mode { Sign, Values };
  GradExchange(int world, int64_t size, Mode mode);
  int world() const { return world_; }
  int64_t size() const { return size_; }
  Mode mode() const { return mode_; }
  // Registered by each rank before the first exchange: its partial and its result buffer
  // (int8 for Sign, fp32 for Values; `size` elements).
  void attach(int rank, const float* partial, void* result);
  // With `pool` (the rank's device threads), the rank's chunk is split over its threads.
  void reduce_scatter(int rank, ThreadPool* pool = nullptr);
  void all_gather(int rank);
  // Bytes one rank reads from other ranks per exchange (reduce-scatter + all-gather).
  int64_t bytes_per_rank() const;

 private:
  void reduce_range(int rank, int64_t c0, int64_t c1);
  std::pair<int64_t, int64_t> chunk(int r) const { return {size_ * r / world_, size_ * (r + 1) / world_}; }
  int world_;
  int64_t size_;
  Mode mode_;
  std::vector<const float*> partial_;
  std::vector<void*> result_;
};

}  // namespace ar::parallel
