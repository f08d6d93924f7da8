// Reference residual add: y = a + b (backward passes dy to both inputs unchanged).
#pragma once
#include <cstdint>

namespace ar::ref {
template <class T>
void add(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
}  // namespace ar::ref
