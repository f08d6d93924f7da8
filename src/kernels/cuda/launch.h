// Launch shapes shared by the element-wise kernels of kernels/cuda/ (nvcc only).
#pragma once
#include <cstdint>

namespace ar::cuda {

constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n elements: enough to fill any current GPU, capped so the index
// arithmetic stays in range.
inline unsigned grid_blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace ar::cuda
