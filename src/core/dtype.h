// Element types and exact conversions between fp32 and the 16-bit float formats.
// bf16: top 16 bits of fp32, round-to-nearest-even, NaN kept quiet.
// fp16: IEEE binary16, round-to-nearest-even, subnormals and overflow to inf handled exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ar {

// F8E4M3: OCP FP8 E4M3FN (safetensors F8_E4M3), a storage type of FP8 checkpoints (core/small_float.h).
enum class DType : uint8_t { F32, BF16, F16, F64, I32, I64, U8, I8, F8E4M3 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses safetensors names ("F32", "BF16", ...); returns false if unknown.
bool dtype_from_safetensors(const std::string& s, DType* out);
const char* dtype_safetensors_name(DType t);

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                        // round to nearest even
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of src (of type `from`) to fp32. Supported: F32, BF16, F16, F64, F8E4M3.
void convert_to_f32(const void* src, DType from, float* dst, size_t n);
// Converts n fp32 values to `to` (F32, BF16, F16).
void convert_from_f32(const float* src, void* dst, DType to, size_t n);

}  // namespace ar
