// The process restart that gives OpenBLAS the level's kernels (kernels/cpu/isa.h). OpenBLAS picks its
// core once, when it is loaded, from OPENBLAS_CORETYPE or its own look at the CPU; so where that choice
// must change (AR_CPU_ISA below the CPU, or a CPU OpenBLAS does not know), the only way is to set the
// variable and execute this program again. The second run finds it set and goes on.
#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/isa.h"

namespace ar::cpu {

void restart_for_openblas_core(char** argv) {
  const char* core = openblas_core_to_set(openblas_get_corename());
  if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "[warn] could not restart with OPENBLAS_CORETYPE=%s; OpenBLAS runs its %s kernels\n", core,
               openblas_get_corename());
}

}  // namespace ar::cpu
