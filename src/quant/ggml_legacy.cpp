#include "quant/ggml_legacy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"

namespace ar::quant {

namespace {

constexpr int kQK = int(kGgmlLegacyBlock);

// Where the fields of each type sit inside its block.
struct LegacyLayout {
  int bits;        // 4, 5 or 8
  bool has_min;    // _1 types store m after d
  int offset;      // added to the signed code to get the stored unsigned value (0 for asym and q8_0)
  int qh_at = -1;  // byte offset of the 32-bit high-bit mask (5-bit types)
  int qs_at = 0;   // byte offset of the nibbles / int8 codes
};

LegacyLayout layout(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return {4, false, 8, -1, 2};
    case GgmlType::Q4_1: return {4, true, 0, -1, 4};
    case GgmlType::Q5_0: return {5, false, 16, 2, 6};
    case GgmlType::Q5_1: return {5, true, 0, 4, 8};
    case GgmlType::Q8_0: return {8, false, 0, -1, 2};
    default: fail(ErrorKind::Unsupported, std::string(ggml_type_name(t)) + " is not a legacy 32-element ggml type");
  }
}

// Stored (unsigned for 4/5 bits, raw int8 for q8_0) value of element i.
int load_code(const LegacyLayout& L, const uint8_t* b, int i) {
  if (L.bits == 8) return int(int8_t(b[L.qs_at + i]));
  // Elements 0..15 in the low nibbles, 16..31 in the high nibbles of the same 16 bytes.
  int u = (b[L.qs_at + (i & 15)] >> (i < 16 ? 0 : 4)) & 0xF;
  if (L.bits == 5) {
    uint32_t qh;
    std::memcpy(&qh, b + L.qh_at, 4);
    u |= int((qh >> i) & 1u) << 4;
  }
  return u;
}

void store_codes(const LegacyLayout& L, const int* u, uint8_t* b) {
  if (L.bits == 8) {
    for (int i = 0; i < kQK; ++i) b[L.qs_at + i] = uint8_t(int8_t(u[i]));
    return;
  }
  for (int i = 0; i < 16; ++i) b[L.qs_at + i] = uint8_t((u[i] & 0xF) | ((u[i + 16] & 0xF) << 4));
  if (L.bits == 5) {
    uint32_t qh = 0;
    for (int i = 0; i < kQK; ++i) qh |= uint32_t((u[i] >> 4) & 1) << i;
    std::memcpy(b + L.qh_at, &qh, 4);
  }
}

void check_row(GgmlType t, int64_t n) {
  if (n < 0 || n % kQK != 0)
    fail(ErrorKind::InvalidInput,
         std::string(ggml_type_name(t)) + ": row of " + std::to_string(n) + " elements is not a multiple of 32");
}

}  // namespace

bool ggml_is_legacy(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0;
}

int ggml_legacy_qmin(GgmlType t) {
  const LegacyLayout L = layout(t);
  return L.bits == 8 ? -128 : -L.offset;
}

int ggml_legacy_qmax(GgmlType t) {
  const LegacyLayout L = layout(t);
  return L.bits == 8 ? 127 : (1 << L.bits) - 1 - L.offset;
}

LegacyBlockParams ggml_legacy_unpack(GgmlType t, const uint8_t* src) {
  const LegacyLayout L = layout(t);
  LegacyBlockParams p;
  p.d = ggml_load_f16(src);
  if (L.has_min) p.m = ggml_load_f16(src + 2);
  for (int i = 0; i < kQK; ++i) p.q[size_t(i)] = load_code(L, src, i) - L.offset;
  return p;
}

void ggml_legacy_pack(GgmlType t, const LegacyBlockParams& p, uint8_t* dst) {
  const LegacyLayout L = layout(t);
  const int lo = ggml_legacy_qmin(t), hi = ggml_legacy_qmax(t);
  int u[kQK];
  for (int i = 0; i < kQK; ++i) {
    const int q = p.q[size_t(i)];
    if (q < lo || q > hi)
      fail(ErrorKind::InvalidInput, std::string(ggml_type_name(t)) + ": code " + std::to_string(q) + " of element " +
                                        std::to_string(i) + " is outside [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "]");
    u[i] = q + L.offset;
  }
  ggml_store_f16(dst, p.d);
  if (L.has_min) ggml_store_f16(dst + 2, p.m);
  store_codes(L, u, dst);
}

void ggml_legacy_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  check_row(t, n);
  const LegacyLayout L = layout(t);
  const int64_t bytes = ggml_block_bytes(t);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const LegacyBlockParams p = ggml_legacy_unpack(t, src + b * bytes);
    float* y = dst + b * kQK;
    // d * q is exact in fp32 (11-bit d times a code of at most 8 bits), so only "+ m" rounds, as in ggml.
    for (int i = 0; i < kQK; ++i) y[i] = L.has_min ? p.d * float(p.q[size_t(i)]) + p.m : p.d * float(p.q[size_t(i)]);
  }
}

namespace {

// One block of ggml's reference RTN. Every product and sum is a separate fp32 operation, as in numpy
// (gguf-py) and in ggml's C built without FP contraction (our -std=c++20 build: GCC's ISO mode sets
// -ffp-contract=off), so x * id + 8.5 is not fused into an fma and truncates the same way.
LegacyBlockParams quantize_block_ref(GgmlType t, const float* x) {
  const LegacyLayout L = layout(t);
  LegacyBlockParams p;
  if (L.bits == 8) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    p.d = d;
    for (int i = 0; i < kQK; ++i) p.q[size_t(i)] = int(std::round(x[i] * id));  // ties away from zero, as roundf
    return p;
  }
  const int levels = (1 << L.bits) - 1;  // 15 or 31
  if (L.has_min) {
    const float mn = *std::min_element(x, x + kQK), mx = *std::max_element(x, x + kQK);
    const float d = (mx - mn) / float(levels), id = d != 0.0f ? 1.0f / d : 0.0f;
    p.d = d;
    p.m = mn;
    for (int i = 0; i < kQK; ++i) p.q[size_t(i)] = std::min(levels, int(std::trunc((x[i] - mn) * id + 0.5f)));
    return p;
  }
  // Symmetric: the element of largest magnitude (the first one on ties) maps to code -offset, so the
  // scale is negative when that element is positive; all 2^bits levels are used.
  float amax = 0.0f, signed_max = 0.0f;
  for (int i = 0; i < kQK; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      signed_max = x[i];
    }
  const float d = signed_max / -float(L.offset), id = d != 0.0f ? 1.0f / d : 0.0f;
  p.d = d;
  for (int i = 0; i < kQK; ++i) {
    const int u = std::clamp(int(std::trunc(x[i] * id + (float(L.offset) + 0.5f))), 0, levels);
    p.q[size_t(i)] = u - L.offset;
  }
  return p;
}

}  // namespace

void ggml_legacy_quantize_ref(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  check_row(t, n);
  const int64_t bytes = ggml_block_bytes(t);
  for (int64_t b = 0; b < n / kQK; ++b) ggml_legacy_pack(t, quantize_block_ref(t, src + b * kQK), dst + b * bytes);
}

}  // namespace ar::quant
