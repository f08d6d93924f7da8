// Byte layouts of the k-quant super-blocks. Each type has a pack (parameters -> bytes) and an unpack
// (bytes -> parameters) written side by side from the same position helpers, so the two cannot
// drift apart; dequantize decodes through unpack (ggml_kquants_dequant.cpp).
//
// The codes are spread over bit planes in an order chosen by ggml for its SIMD kernels. Element e of a
// super-block (0..255) sits at:
//   2-bit fields (q2_k/q3_k qs, q6_k qh): byte (e / 128) * 32 + e % 32, bits 2 * ((e % 128) / 32)
//   1-bit fields (q3_k hmask, q5_k qh):   byte e % 32, bit e / 32
//   nibbles of q4_k/q5_k qs:              byte (e / 64) * 32 + e % 32, high nibble when (e % 64) >= 32
//   nibbles of q6_k ql:                   byte (e / 128) * 64 + e % 64, high nibble when (e % 128) >= 64
#include "quant/ggml_kquants.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace ar::quant {

namespace {

constexpr int kQK = int(kGgmlSuperBlock);

int crumb_byte(int e) { return (e / 128) * 32 + e % 32; }
int crumb_shift(int e) { return 2 * ((e % 128) / 32); }
int bit_byte(int e) { return e % 32; }
int bit_shift(int e) { return e / 32; }
int k4_nib_byte(int e) { return (e / 64) * 32 + e % 32; }
int k4_nib_shift(int e) { return (e % 64) >= 32 ? 4 : 0; }
int q6_nib_byte(int e) { return (e / 128) * 64 + e % 64; }
int q6_nib_shift(int e) { return (e % 128) >= 64 ? 4 : 0; }

int get(const uint8_t* b, int byte, int shift, int mask) { return (b[byte] >> shift) & mask; }
void put(uint8_t* b, int byte, int shift, int v) { b[byte] = uint8_t(b[byte] | (v << shift)); }

// q4_k/q5_k: eight 6-bit scales and eight 6-bit mins in 12 bytes. Bytes 0-3 hold sc[0..3] in their low
// 6 bits, bytes 4-7 mn[0..3]; groups 4-7 keep their low nibbles in bytes 8-11 (sc low, mn high) and
// their top 2 bits in the spare top bits of bytes 0-3 (sc) and 4-7 (mn).
void pack_scale_min_k4(const KQuantBlockParams& p, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(p.sc[j] | ((p.sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(p.mn[j] | ((p.mn[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((p.sc[j + 4] & 0xF) | ((p.mn[j + 4] & 0xF) << 4));
  }
}

void unpack_scale_min_k4(const uint8_t* s, KQuantBlockParams& p) {
  for (int j = 0; j < 4; ++j) {
    p.sc[j] = s[j] & 63;
    p.mn[j] = s[j + 4] & 63;
    p.sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 6) << 4);
    p.mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

// q3_k: sixteen 6-bit scales stored as sc + 32 in 12 bytes: the low nibble of scale i in byte i % 8
// (low nibble for i < 8, high for i >= 8), its top 2 bits in byte 8 + i % 4 at bit 2 * (i / 4).
void pack_scales_q3(const KQuantBlockParams& p, uint8_t* s) {
  for (int i = 0; i < 16; ++i) {
    const int u = p.sc[size_t(i)] + 32;
    put(s, i % 8, i < 8 ? 0 : 4, u & 0xF);
    put(s, 8 + i % 4, 2 * (i / 4), u >> 4);
  }
}

void unpack_scales_q3(const uint8_t* s, KQuantBlockParams& p) {
  for (int i = 0; i < 16; ++i)
    p.sc[size_t(i)] = (get(s, i % 8, i < 8 ? 0 : 4, 0xF) | (get(s, 8 + i % 4, 2 * (i / 4), 3) << 4)) - 32;
}

// q2_k: scales[16] @0 (sc low nibble, mn high), qs[64] @16, d @80, dmin @82.
void pack_q2(const KQuantBlockParams& p, uint8_t* b) {
  for (int j = 0; j < 16; ++j) b[j] = uint8_t(p.sc[size_t(j)] | (p.mn[size_t(j)] << 4));
  for (int e = 0; e < kQK; ++e) put(b + 16, crumb_byte(e), crumb_shift(e), p.q[size_t(e)]);
  ggml_store_f16(b + 80, p.d);
  ggml_store_f16(b + 82, p.dmin);
}

void unpack_q2(const uint8_t* b, KQuantBlockParams& p) {
  for (int j = 0; j < 16; ++j) {
    p.sc[size_t(j)] = b[j] & 0xF;
    p.mn[size_t(j)] = b[j] >> 4;
  }
  for (int e = 0; e < kQK; ++e) p.q[size_t(e)] = get(b + 16, crumb_byte(e), crumb_shift(e), 3);
  p.d = ggml_load_f16(b + 80);
  p.dmin = ggml_load_f16(b + 82);
}

// q3_k: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. The stored 3-bit value u = q + 4 has its
// low 2 bits in qs and its top bit in hmask (ggml reads a clear hmask bit as "subtract 4").
void pack_q3(const KQuantBlockParams& p, uint8_t* b) {
  for (int e = 0; e < kQK; ++e) {
    const int u = p.q[size_t(e)] + 4;
    put(b, bit_byte(e), bit_shift(e), u >> 2);
    put(b + 32, crumb_byte(e), crumb_shift(e), u & 3);
  }
  pack_scales_q3(p, b + 96);
  ggml_store_f16(b + 108, p.d);
}

void unpack_q3(const uint8_t* b, KQuantBlockParams& p) {
  for (int e = 0; e < kQK; ++e)
    p.q[size_t(e)] = (get(b + 32, crumb_byte(e), crumb_shift(e), 3) | (get(b, bit_byte(e), bit_shift(e), 1) << 2)) - 4;
  unpack_scales_q3(b + 96, p);
  p.d = ggml_load_f16(b + 108);
}

// q4_k: d @0, dmin @2, scales[12] @4, qs[128] @16.  q5_k: the same with qh[32] @16 (bit 4 of each
// code) and qs[128] @48.
void pack_q45(const KQuantBlockParams& p, uint8_t* b, bool five) {
  ggml_store_f16(b, p.d);
  ggml_store_f16(b + 2, p.dmin);
  pack_scale_min_k4(p, b + 4);
  uint8_t* qs = b + (five ? 48 : 16);
  for (int e = 0; e < kQK; ++e) {
    const int u = p.q[size_t(e)];
    put(qs, k4_nib_byte(e), k4_nib_shift(e), u & 0xF);
    if (five) put(b + 16, bit_byte(e), bit_shift(e), u >> 4);
  }
}

void unpack_q45(const uint8_t* b, KQuantBlockParams& p, bool five) {
  p.d = ggml_load_f16(b);
  p.dmin = ggml_load_f16(b + 2);
  unpack_scale_min_k4(b + 4, p);
  const uint8_t* qs = b + (five ? 48 : 16);
  for (int e = 0; e < kQK; ++e) {
    int u = get(qs, k4_nib_byte(e), k4_nib_shift(e), 0xF);
    if (five) u |= get(b + 16, bit_byte(e), bit_shift(e), 1) << 4;
    p.q[size_t(e)] = u;
  }
}

// q6_k: ql[128] @0 (low nibbles), qh[64] @128 (top 2 bits), scales[16] int8 @192, d @208; the stored
// 6-bit value is q + 32.
void pack_q6(const KQuantBlockParams& p, uint8_t* b) {
  for (int e = 0; e < kQK; ++e) {
    const int u = p.q[size_t(e)] + 32;
    put(b, q6_nib_byte(e), q6_nib_shift(e), u & 0xF);
    put(b + 128, crumb_byte(e), crumb_shift(e), u >> 4);
  }
  for (int j = 0; j < 16; ++j) b[192 + j] = uint8_t(int8_t(p.sc[size_t(j)]));
  ggml_store_f16(b + 208, p.d);
}

void unpack_q6(const uint8_t* b, KQuantBlockParams& p) {
  for (int e = 0; e < kQK; ++e)
    p.q[size_t(e)] =
        (get(b, q6_nib_byte(e), q6_nib_shift(e), 0xF) | (get(b + 128, crumb_byte(e), crumb_shift(e), 3) << 4)) - 32;
  for (int j = 0; j < 16; ++j) p.sc[size_t(j)] = int(int8_t(b[192 + j]));
  p.d = ggml_load_f16(b + 208);
}

void check_range(GgmlType t, const char* field, int index, int v, int lo, int hi) {
  if (v < lo || v > hi)
    fail(ErrorKind::InvalidInput, std::string(ggml_type_name(t)) + ": " + field + "[" + std::to_string(index) +
                                      "] = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                                      std::to_string(hi) + "]");
}

void check_params(GgmlType t, const KQuantSpec& s, const KQuantBlockParams& p) {
  for (int j = 0; j < s.groups; ++j) {
    check_range(t, "sc", j, p.sc[size_t(j)], s.sc_min, s.sc_max);
    if (s.has_min) check_range(t, "mn", j, p.mn[size_t(j)], 0, s.mn_max);
  }
  for (int e = 0; e < kQK; ++e) check_range(t, "q", e, p.q[size_t(e)], s.q_min, s.q_max);
}

}  // namespace

bool ggml_is_kquant(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K;
}

KQuantSpec ggml_kquant_spec(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: return {16, 16, true, 0, 15, 15, 0, 3};
    case GgmlType::Q3_K: return {16, 16, false, -32, 31, 0, -4, 3};
    case GgmlType::Q4_K: return {8, 32, true, 0, 63, 63, 0, 15};
    case GgmlType::Q5_K: return {8, 32, true, 0, 63, 63, 0, 31};
    case GgmlType::Q6_K: return {16, 16, false, -128, 127, 0, -32, 31};
    default: fail(ErrorKind::Unsupported, std::string(ggml_type_name(t)) + " is not a ggml k-quant type");
  }
}

void ggml_kquant_pack(GgmlType t, const KQuantBlockParams& p, uint8_t* dst) {
  check_params(t, ggml_kquant_spec(t), p);
  std::memset(dst, 0, size_t(ggml_block_bytes(t)));  // the writers OR their fields in
  switch (t) {
    case GgmlType::Q2_K: pack_q2(p, dst); return;
    case GgmlType::Q3_K: pack_q3(p, dst); return;
    case GgmlType::Q4_K: pack_q45(p, dst, false); return;
    case GgmlType::Q5_K: pack_q45(p, dst, true); return;
    case GgmlType::Q6_K: pack_q6(p, dst); return;
    default: AR_CHECK(false, "not a k-quant");
  }
}

KQuantBlockParams ggml_kquant_unpack(GgmlType t, const uint8_t* src) {
  KQuantBlockParams p;
  switch (t) {
    case GgmlType::Q2_K: unpack_q2(src, p); break;
    case GgmlType::Q3_K: unpack_q3(src, p); break;
    case GgmlType::Q4_K: unpack_q45(src, p, false); break;
    case GgmlType::Q5_K: unpack_q45(src, p, true); break;
    case GgmlType::Q6_K: unpack_q6(src, p); break;
    default: ggml_kquant_spec(t);  // fails naming the type
  }
  return p;
}

}  // namespace ar::quant
