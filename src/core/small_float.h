// The small float codes of the floating-point schemes (OCP MX spec v1.0 and NVIDIA's NVFP4):
//   E2M1   (FP4)  1 sign, 2 exponent (bias 1), 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6; no Inf/NaN.
//   E4M3FN (FP8)  1 sign, 4 exponent (bias 7), 3 mantissa bits: subnormals down to 2^-9, max 448;
//                 no Inf; S.1111.111 is NaN (torch.float8_e4m3fn).
//   E8M0   (the MX block scale) 8 exponent bits, no sign, no mantissa: 2^(code - 127); 0xFF is NaN.
// Encoding rounds to nearest with ties to the even code (the even mantissa), as torch's casts and
// AutoRound's quant_element / cast_to_fp4 do. Policy at the edges, the same for both formats:
//   - magnitudes past the largest finite value saturate to it (+-6, +-448): AutoRound always clamps
//     before the cast, and a scale that overflows must not turn into NaN;
//   - the sign of zero is kept (-0.0 -> the negative-zero code, which decodes to -0.0);
//   - NaN encodes to E4M3FN's NaN code (0x7F, sign kept) and to E2M1 +0 (E2M1 has no NaN; callers
//     refuse non-finite weights before quantizing, this only keeps the encoder total).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/hd.h"

namespace ar {

constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;

uint8_t e2m1_encode(float x);   // 4-bit code in the low nibble
float e2m1_decode(uint8_t c);   // uses the low nibble only
uint8_t e4m3_encode(float x);
float e4m3_decode(uint8_t c);

// E8M0: the code of 2^e for e in [-127, 127], and back (0xFF -> NaN).
inline uint8_t e8m0_encode(int e) { return uint8_t(e + 127); }
float e8m0_decode(uint8_t c);
// 2^e for e in [-149, 127], built from bits: exact for subnormal results too, where ldexp's arithmetic
// gives 0 under the engine's flush-to-zero mode (core/float_mode.h).
AR_HD inline float pow2f(int e) {
  return hd::bits_float(e >= -126 ? uint32_t(e + 127) << 23 : uint32_t(1) << (e + 149));
}

// x rounded onto the format's grid: the value decode(encode(x)) (E2M1: NaN -> +0; E4M3: NaN -> NaN),
// computed without the encoder's frexp / ldexp, since the QDQ runs it per element. Tested against
// decode(encode(x)) on every tie, its neighbours and a dense sweep of floats (test_small_float.cpp).
// The *_finite forms give the same values for finite x without a branch (every case computed, then
// selected), so that the QDQ's element loops vectorize (quant/qdq_fp.cpp, whose arguments are finite);
// E2M1 as the sum of the grid steps passed (each partial sum exact).
// AR_HD: the CUDA backend's float QDQ runs them too (kernels/cuda/qdq_fp.cu).
AR_HD inline float e2m1_round_finite(float x) {
  const float a = hd::fabs(x);
  // The midpoints between grid values, each tie going to the even code (0, 1, 2, 4 are even codes).
  const float r = (a > 0.25f ? 0.5f : 0.0f) + (a >= 0.75f ? 0.5f : 0.0f) + (a > 1.25f ? 0.5f : 0.0f) +
                  (a >= 1.75f ? 0.5f : 0.0f) + (a > 2.5f ? 1.0f : 0.0f) + (a >= 3.5f ? 1.0f : 0.0f) +
                  (a > 5.0f ? 2.0f : 0.0f);
  return hd::copysign(r, x);
}
AR_HD inline float e4m3_round_finite(float x) {
  const float a = hd::fabs(x);
  const float sub = hd::rint(a * 512.0f) * 0x1p-9f;  // subnormal grid 2^-9 (both products exact)
  uint32_t u = hd::float_bits(a);  // normal: 3 mantissa bits, round to nearest even on the fp32 bits
  u = (u + 0x7FFFFu + ((u >> 20) & 1u)) & 0xFFF00000u;
  float nrm = hd::bits_float(u);
  nrm = nrm > kE4M3Max ? kE4M3Max : nrm;
  return hd::copysign(a >= kE4M3Max ? kE4M3Max : a < 0x1p-6f ? sub : nrm, x);  // saturating above
}
AR_HD inline float e2m1_round(float x) { return x != x ? 0.0f : e2m1_round_finite(x); }
AR_HD inline float e4m3_round(float x) { return x != x ? hd::bits_float(0x7FC00000u) : e4m3_round_finite(x); }

}  // namespace ar
