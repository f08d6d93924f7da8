// Functions shared by host and device code: AR_HD marks them __host__ __device__ under nvcc and is empty
// for the host compiler, so the per-element arithmetic of QDQ and of the sign-SGD step is one source that
// the CPU path runs (and the CPU tests check) and the CUDA kernels run (kernels/cuda/). The helpers below
// give the few libm calls that source needs one spelling on both sides; each is exact (no approximation),
// so host and device produce the same bits for the same inputs.
#pragma once
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define AR_HD __host__ __device__
#else
#define AR_HD
#endif

namespace ar::hd {

// Round to nearest, ties to even (the default floating-point environment on the host).
template <class T>
AR_HD inline T rint(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::rintf(x);
  else return ::rint(x);
#else
  return std::nearbyint(x);
#endif
}

// a * b + c with one rounding.
template <class T>
AR_HD inline T fma(T a, T b, T c) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::fmaf(a, b, c);
  else return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

template <class T>
AR_HD inline bool isfinite(T x) {
#if defined(__CUDA_ARCH__)
  return ::isfinite(x);
#else
  return std::isfinite(x);
#endif
}

template <class T>
AR_HD inline T abs(T x) {
  return x < T(0) ? -x : x;
}

}  // namespace ar::hd
