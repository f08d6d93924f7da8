# ar_warnings: INTERFACE target carrying the project's warning and codegen flags.
add_library(ar_warnings INTERFACE)
target_compile_options(ar_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
  -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough)
if(AR_WERROR)
  target_compile_options(ar_warnings INTERFACE -Werror)
endif()
if(AR_NATIVE)
  target_compile_options(ar_warnings INTERFACE -march=native)
endif()
# Kernels rely on IEEE semantics (no -ffast-math): the reference comparisons depend on it.
