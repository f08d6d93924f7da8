# The CUDA backend (src/kernels/cuda/, docs/cuda.md). AUTO builds it when nvcc and the toolkit are found;
# ON requires them; OFF skips it. Sanitizer and fuzz builds leave it out (their flags are host-only).
# Device code targets sm_80 and sm_90 and carries sm_90 PTX for newer GPUs. --fmad=false: device code
# rounds every product and sum as written (as the host build does), so the shared QDQ and step arithmetic
# (core/hd.h) gives the same bits on both; explicit fma calls stay fused.
set(AR_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found) | ON | OFF")
set(AR_HAVE_CUDA OFF)
if(NOT AR_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "AR_CUDA must be AUTO, ON or OFF (got '${AR_CUDA}')")
endif()
if(NOT AR_CUDA STREQUAL "OFF" AND AR_SANITIZE STREQUAL "" AND NOT AR_FUZZ)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")  # CMake 3.25 does not know it for nvcc 13
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    find_package(CUDAToolkit REQUIRED)
    set(AR_HAVE_CUDA ON)
    add_library(ar_cuda_flags INTERFACE)
    target_compile_options(ar_cuda_flags INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false;-Xcompiler=-Wall,-Wextra>")
    if(AR_WERROR)
      target_compile_options(ar_cuda_flags INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings;-Xcompiler=-Werror>")
    endif()
    message(STATUS "CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(AR_CUDA STREQUAL "ON")
    message(FATAL_ERROR "AR_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "CUDA backend: off (no nvcc found)")
  endif()
endif()
