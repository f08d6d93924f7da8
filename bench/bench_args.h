// Command-line integers and best-of-N timing shared by the benchmarks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "peaks.h"

namespace ar::bench {

// The integer after `name` on the command line, or `def`.
inline int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return def;
}

// The fastest of `reps` runs of f, in seconds, after one warm-up run.
inline double best_time(int64_t reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    const double t0 = now_s();
    f();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

}  // namespace ar::bench
