// Wide instructions under names without an ISA suffix: scripts/check_isa_baseline.sh must report
// them (its own test in tests/CMakeLists.txt). Never linked into anything.
#include <immintrin.h>

__attribute__((target("avx512f"))) void probe_wide_unmarked(float* x) {
  _mm512_storeu_ps(x, _mm512_add_ps(_mm512_loadu_ps(x), _mm512_set1_ps(1.f)));
}

__attribute__((target("avx2"))) void probe_ymm_unmarked(float* x) {
  _mm256_storeu_ps(x, _mm256_add_ps(_mm256_loadu_ps(x), _mm256_set1_ps(1.f)));
}
