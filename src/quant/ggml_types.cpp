#include "quant/ggml_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/ggml_kquants.h"
#include "quant/ggml_legacy.h"
#include "quant/ggml_mxfp4.h"

namespace ar::quant {

namespace {

struct TypeInfo {
  GgmlType type;
  const char* name;
  int64_t elems, bytes;
};

// Block sizes as ggml's block_* structs lay them out (fp16 fields are 2 bytes, no padding).
constexpr std::array<TypeInfo, 14> kTypes{{
    {GgmlType::F32, "f32", 1, 4},
    {GgmlType::F16, "f16", 1, 2},
    {GgmlType::Q4_0, "q4_0", 32, 2 + 16},
    {GgmlType::Q4_1, "q4_1", 32, 2 + 2 + 16},
    {GgmlType::Q5_0, "q5_0", 32, 2 + 4 + 16},
    {GgmlType::Q5_1, "q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::Q8_0, "q8_0", 32, 2 + 32},
    {GgmlType::Q2_K, "q2_k", 256, 16 + 64 + 2 + 2},        // scales, qs, d, dmin
    {GgmlType::Q3_K, "q3_k", 256, 32 + 64 + 12 + 2},       // hmask, qs, scales, d
    {GgmlType::Q4_K, "q4_k", 256, 2 + 2 + 12 + 128},       // d, dmin, scales, qs
    {GgmlType::Q5_K, "q5_k", 256, 2 + 2 + 12 + 32 + 128},  // d, dmin, scales, qh, qs
    {GgmlType::Q6_K, "q6_k", 256, 128 + 64 + 16 + 2},      // ql, qh, scales, d
    {GgmlType::BF16, "bf16", 1, 2},
    {GgmlType::MXFP4, "mxfp4", kGgmlMxfp4Block, kGgmlMxfp4BlockBytes},  // e, qs (read only: ggml_mxfp4.h)
}};

const TypeInfo* find_info(uint32_t id) {
  for (const auto& ti : kTypes)
    if (uint32_t(ti.type) == id) return &ti;
  return nullptr;
}

const TypeInfo& info(GgmlType t) {
  const TypeInfo* ti = find_info(uint32_t(t));
  AR_CHECK(ti != nullptr, "ggml type id " + std::to_string(uint32_t(t)) + " is not in the table");
  return *ti;
}

}  // namespace

bool ggml_type_known(uint32_t id) { return find_info(id) != nullptr; }
int64_t ggml_block_elems(GgmlType t) { return info(t).elems; }
int64_t ggml_block_bytes(GgmlType t) { return info(t).bytes; }
const char* ggml_type_name(GgmlType t) { return info(t).name; }

GgmlType ggml_type_from_name(const std::string& name) {
  std::string low = name;
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (low == "fp16") return GgmlType::F16;  // AutoRound spells the unquantized formats gguf:fp16 / bf16
  if (low == "fp32") return GgmlType::F32;
  for (const auto& ti : kTypes)
    if (low == ti.name) return ti.type;
  fail(ErrorKind::InvalidInput, "unknown ggml type '" + name +
                                    "' (expected f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, "
                                    "q6_k or mxfp4)");
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const TypeInfo& ti = info(t);
  if (n < 0 || n % ti.elems != 0)
    fail(ErrorKind::InvalidInput, std::string("a row of ") + std::to_string(n) + " elements cannot be stored as " +
                                      ti.name + ": the row length must be a multiple of its block of " +
                                      std::to_string(ti.elems));
  return n / ti.elems * ti.bytes;
}

void ggml_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  ggml_row_bytes(t, n);  // validates n
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16: convert_to_f32(src, DType::F16, dst, size_t(n)); return;
    case GgmlType::BF16: convert_to_f32(src, DType::BF16, dst, size_t(n)); return;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0: ggml_legacy_dequantize(t, src, dst, n); return;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: ggml_kquant_dequantize(t, src, dst, n); return;
    case GgmlType::MXFP4: ggml_mxfp4_dequantize(src, dst, n); return;
  }
  AR_CHECK(false, "unhandled ggml type");
}

}  // namespace ar::quant
