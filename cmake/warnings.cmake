# ar_warnings: INTERFACE target carrying the project's warning and codegen flags.
add_library(ar_warnings INTERFACE)
# The flags are for the host compiler only (CXX); nvcc's are in cuda.cmake.
set(AR_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused -Woverloaded-virtual
  -Wnull-dereference -Wimplicit-fallthrough)
target_compile_options(ar_warnings INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:${AR_CXX_WARNINGS}>")
if(AR_WERROR)
  target_compile_options(ar_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(AR_NATIVE)
  target_compile_options(ar_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
elseif(AR_BASELINE MATCHES "^x86-64-v[23]$")
  target_compile_options(ar_warnings INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:-march=${AR_BASELINE};-mtune=generic>")
else()
  message(FATAL_ERROR "AR_BASELINE must be x86-64-v3 or x86-64-v2 (got '${AR_BASELINE}')")
endif()
# Kernels rely on IEEE semantics (no -ffast-math): the reference comparisons depend on it.
