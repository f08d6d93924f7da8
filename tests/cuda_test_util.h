// Helpers of the CUDA tests (test_cuda, test_cuda_float_qdq): seeded inputs, device arrays back to the
// host, and the bit-for-bit comparison that names the first differing element.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"

namespace ar::test {

inline std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

template <class T>
std::vector<T> download(cuda::DeviceContext& ctx, const cuda::DeviceArray<T>& a) {
  std::vector<T> h(size_t(a.n));
  ctx.download(h.data(), a.data(), a.bytes());
  return h;
}

template <class T>
void expect_same_bits(const std::vector<T>& cpu, const std::vector<T>& gpu, const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (std::memcmp(&cpu[i], &gpu[i], sizeof(T)) != 0 && diff++ == 0) first = i;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << cpu.size() << " differ, the first at " << first;
}

}  // namespace ar::test
