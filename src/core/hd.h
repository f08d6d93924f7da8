// Functions shared by host and device code: AR_HD marks them __host__ __device__ under nvcc and is empty
// for the host compiler, so the per-element arithmetic of QDQ and of the sign-SGD step, and the
// reference kernels' units (kernels/ref/), are one source that the CPU runs (and the CPU tests check)
// and the CUDA kernels run (kernels/cuda/). The helpers below give the libm calls that source needs one
// spelling on both sides. rint, fma, isfinite and abs are exact, so host and device produce the same
// bits for the same inputs; sqrt is correctly rounded on both; exp and log are not (CUDA's are within
// 2 ulp), so code using them matches across the two within tolerance only.
#pragma once
#include <cmath>
#include <cstdint>
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

template <class T>
AR_HD inline T sqrt(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::sqrtf(x);
  else return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}

template <class T>
AR_HD inline T exp(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::expf(x);
  else return ::exp(x);
#else
  return std::exp(x);
#endif
}

template <class T>
AR_HD inline T log(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return ::logf(x);
  else return ::log(x);
#else
  return std::log(x);
#endif
}

template <class T>
AR_HD inline T infinity() {
  return T(__builtin_huge_val());
}

// |x| with the sign bit cleared (-0 -> +0), as fabs.
AR_HD inline float fabs(float x) {
#if defined(__CUDA_ARCH__)
  return ::fabsf(x);
#else
  return std::fabs(x);
#endif
}

AR_HD inline float copysign(float x, float sign) {
#if defined(__CUDA_ARCH__)
  return ::copysignf(x, sign);
#else
  return std::copysign(x, sign);
#endif
}

// x = m 2^e with |m| in [0.5, 1) (0 for x = 0): exact on both sides.
AR_HD inline float frexp(float x, int* e) {
#if defined(__CUDA_ARCH__)
  return ::frexpf(x, e);
#else
  return std::frexp(x, e);
#endif
}

AR_HD inline uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
AR_HD inline float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

}  // namespace ar::hd
