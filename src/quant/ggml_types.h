// ggml's tensor element types as GGUF files number them, and their block geometry: a row of n
// elements of a quantized type is n / block_elems blocks of block_bytes each (gguf-py's
// GGML_QUANT_SIZES). Only the types we read or write are listed; ids are ggml's, so they can be
// written to and read from GGUF headers as they are.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "core/dtype.h"

namespace ar::quant {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
  MXFP4 = 39,  // read only (llama.cpp's gpt-oss experts): ggml_mxfp4.h
};

// The k-quants' super-block: 256 elements (ggml's QK_K); the legacy types' block: 32 (QK4_0 ...).
inline constexpr int64_t kGgmlSuperBlock = 256;
inline constexpr int64_t kGgmlLegacyBlock = 32;

// False for ids outside the list above (e.g. a GGUF file with an IQ type); use before casting.
bool ggml_type_known(uint32_t id);
// Elements per block: 256 (k-quants), 32 (legacy, MXFP4), 1 (F32, F16, BF16).
int64_t ggml_block_elems(GgmlType t);
// Bytes per block, e.g. q4_0 18, q4_k 144, f16 2.
int64_t ggml_block_bytes(GgmlType t);
// ggml's name in lower case (AutoRound's `gguf:<type>` spelling): "f32", "f16", "bf16", "q4_0", "q4_k" ...
const char* ggml_type_name(GgmlType t);
// Inverse of ggml_type_name, case-insensitive ("Q4_K" too), also taking AutoRound's "fp16"/"fp32";
// InvalidInput naming the string when unknown.
GgmlType ggml_type_from_name(const std::string& name);
// Bytes of a row of n elements; InvalidInput when n is negative or not a multiple of the block.
int64_t ggml_row_bytes(GgmlType t, int64_t n);

// Decodes n elements of type t (n a multiple of the block) to fp32, bit-exact with ggml and
// gguf-py's gguf.quants.dequantize. Dispatches to ggml_legacy / ggml_kquants for quantized types.
void ggml_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n);

// Block fields are little-endian and unaligned (blocks of 18, 110 ... bytes follow each other), so
// they are read and written through memcpy. The hosts we build for are little-endian.
inline float ggml_load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
inline void ggml_store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);  // round to nearest even, as numpy's astype(float16) and ggml
  std::memcpy(p, &h, 2);
}

}  // namespace ar::quant
