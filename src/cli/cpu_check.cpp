// Runs before main and before any code compiled at the build's baseline can: a CPU below the baseline
// (x86-64-v3 by default: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE) gets one line naming what it lacks and
// exit status 1 instead of an illegal-instruction crash somewhere later. This file is compiled for plain
// x86-64 (src/cli/CMakeLists.txt); AR_REQUIRE_V3 is defined where the baseline is x86-64-v3.
#include <cstdio>
#include <cstdlib>

namespace {
__attribute__((constructor(101))) void require_baseline() {
#ifdef AR_REQUIRE_V3
  __builtin_cpu_init();
  const char* missing = !__builtin_cpu_supports("avx2")   ? "avx2"
                        : !__builtin_cpu_supports("fma")  ? "fma"
                        : !__builtin_cpu_supports("bmi2") ? "bmi2"
                        : !__builtin_cpu_supports("bmi")  ? "bmi1"
                        : !__builtin_cpu_supports("f16c") ? "f16c"
                                                          : nullptr;
  if (!missing) return;
  std::fprintf(stderr,
               "error: this build of autoround targets x86-64-v3 (AVX2, FMA, BMI1/2, F16C) and this CPU lacks %s; "
               "rebuild with cmake -DAR_BASELINE=x86-64-v2\n",
               missing);
  std::_Exit(1);
#endif
}
}  // namespace
