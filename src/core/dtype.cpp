#include "core/dtype.h"

#include <cstring>

#include "core/error.h"
#include "core/small_float.h"

namespace ar {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: case DType::I8: case DType::F8E4M3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::F64: return "fp64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::I8: return "int8";
    case DType::F8E4M3: return "fp8_e4m3";
  }
  return "?";
}

namespace {
struct StName { const char* name; DType t; };
constexpr StName kSt[] = {{"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16}, {"F64", DType::F64},
                          {"I32", DType::I32}, {"I64", DType::I64},   {"U8", DType::U8},   {"I8", DType::I8},
                          {"F8_E4M3", DType::F8E4M3}};
}  // namespace

bool dtype_from_safetensors(const std::string& s, DType* out) {
  for (const auto& e : kSt)
    if (s == e.name) { *out = e.t; return true; }
  return false;
}

const char* dtype_safetensors_name(DType t) {
  for (const auto& e : kSt)
    if (e.t == t) return e.name;
  return "?";
}

static inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void convert_to_f32(const void* src, DType from, float* dst, size_t n) {
  switch (from) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto* s = static_cast<const uint8_t*>(src);  // may be unaligned (mmap'd safetensors)
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(s + 2 * i));
      return;
    }
    case DType::F16: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(s + 2 * i));
      return;
    }
    case DType::F64: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, s + 8 * i, 8);
        dst[i] = float(d);
      }
      return;
    }
    case DType::F8E4M3: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = e4m3_decode(s[i]);
      return;
    }
    default: fail(ErrorKind::Unsupported, std::string("cannot convert ") + dtype_name(from) + " to fp32");
  }
}

void convert_from_f32(const float* src, void* dst, DType to, size_t n) {
  switch (to) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default: fail(ErrorKind::Unsupported, std::string("cannot convert fp32 to ") + dtype_name(to));
  }
}

}  // namespace ar
