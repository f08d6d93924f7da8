// Element types and exact conversions between fp32 and the 16-bit float formats.
// bf16: top 16 bits of fp32, round-to-nearest-even, NaN kept quiet.
// fp16: IEEE binary16, round-to-nearest-even, subnormals and overflow to inf handled exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/hd.h"

namespace ar {

// F8E4M3: OCP FP8 E4M3FN (safetensors F8_E4M3), a storage type of FP8 checkpoints (core/small_float.h).
enum class DType : uint8_t { F32, BF16, F16, F64, I32, I64, U8, I8, F8E4M3 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses safetensors names ("F32", "BF16", ...); returns false if unknown.
bool dtype_from_safetensors(const std::string& s, DType* out);
const char* dtype_safetensors_name(DType t);

AR_HD inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; a NaN stays a NaN (quieted). Both results are computed and one is selected,
// so that loops over it vectorize.
AR_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t nan = (u >> 16) | 0x40u, rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rne);
}
AR_HD inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
AR_HD inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x47800000u) {                                 // >= 65536 -> inf, but check rounding edge
    return uint16_t(sign | 0x7c00u);
  }
  if (a < 0x38800000u) {  // below smallest normal half (2^-14): subnormal or zero
    if (a < 0x33000000u) return uint16_t(sign);  // < 2^-25 rounds to zero
    int e = int(a >> 23);                        // biased fp32 exponent
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    // value = m * 2^(e-150); in units of the half subnormal step 2^-24 that is m >> (126 - e).
    int shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  r -= 0x38000000u;                             // rebias 127 -> 15
  if (r >= 0x0f800000u) return uint16_t(sign | 0x7c00u);  // rounded up to inf
  return uint16_t(sign | (r >> 13));
}

// Converts n elements of src (of type `from`) to fp32. Supported: F32, BF16, F16, F64, F8E4M3.
void convert_to_f32(const void* src, DType from, float* dst, size_t n);
// Converts n fp32 values to `to` (F32, BF16, F16).
void convert_from_f32(const float* src, void* dst, DType to, size_t n);

}  // namespace ar
