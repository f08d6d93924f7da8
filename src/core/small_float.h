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
#include <cstdint>

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

// x rounded onto the format's grid: decode(encode(x)).
inline float e2m1_round(float x) { return e2m1_decode(e2m1_encode(x)); }
inline float e4m3_round(float x) { return e4m3_decode(e4m3_encode(x)); }

}  // namespace ar
