#include "parallel/exchange.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"

namespace ar::parallel {

GradExchange::GradExchange(int world, int64_t size, Mode mode)
    : world_(world), size_(size), mode_(mode), partial_(size_t(world), nullptr), result_(size_t(world), nullptr) {
  AR_CHECK(world >= 1 && size >= 0, "bad exchange shape");
}

void GradExchange::attach(int rank, const float* partial, void* result) {
  partial_[size_t(rank)] = partial;
  result_[size_t(rank)] = result;
}

namespace {
// The fixed tree over ranks [a, b) for element i.
float tree_sum(const float* const* p, int a, int b, int64_t i) {
  if (b - a == 1) return p[a][i];
  const int mid = (a + b) / 2;
  return tree_sum(p, a, mid, i) + tree_sum(p, mid, b, i);
}
}  // namespace

void GradExchange::reduce_scatter(int rank, ThreadPool* pool) {
  // Plain variables, not a structured binding: clang < 16 cannot capture bindings in lambdas.
  const int64_t c0 = chunk(rank).first, c1 = chunk(rank).second;
  if (pool && pool->size() > 1) {
    pool->parallel_for(c1 - c0, [&](int64_t i0, int64_t i1) { reduce_range(rank, c0 + i0, c0 + i1); }, 1 << 15);
  } else {
    reduce_range(rank, c0, c1);
  }
}

void GradExchange::reduce_range(int rank, int64_t c0, int64_t c1) {
  const float* const* p = partial_.data();
  for (int64_t i = c0; i < c1; ++i) {
    const float s = tree_sum(p, 0, world_, i);
    if (!std::isfinite(s)) {
      for (int r = 0; r < world_; ++r)
        if (!std::isfinite(p[r][i]))
          fail(ErrorKind::InvalidInput, "non-finite gradient from replica " + std::to_string(r) + " at element " +
                                            std::to_string(i));
      fail(ErrorKind::InvalidInput, "gradient sum overflows at element " + std::to_string(i));
    }
    if (mode_ == Mode::Sign) static_cast<int8_t*>(result_[size_t(rank)])[i] = int8_t((s > 0.f) - (s < 0.f));
    else static_cast<float*>(result_[size_t(rank)])[i] = s;
  }
}

void GradExchange::all_gather(int rank) {
  const size_t el = mode_ == Mode::Sign ? 1 : 4;
  for (int r = 0; r < world_; ++r) {
    if (r == rank) continue;
    const auto [c0, c1] = chunk(r);
    std::memcpy(static_cast<char*>(result_[size_t(rank)]) + c0 * int64_t(el),
                static_cast<const char*>(result_[size_t(r)]) + c0 * int64_t(el), size_t(c1 - c0) * el);
  }
}

int64_t GradExchange::bytes_per_rank() const {
  const int64_t others = size_ - size_ / world_;  // elements of the chunks other ranks own
  return others * 4 + others * (mode_ == Mode::Sign ? 1 : 4);
}

}  // namespace ar::parallel
