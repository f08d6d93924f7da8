// ggml's MXFP4 block (GGML_TYPE_MXFP4, id 39: llama.cpp's gpt-oss files keep their experts in it), read
// only. A block of 32 elements is 17 bytes:
//   [e u8][qs 16 B]   element i < 16 in the low nibble of qs[i], i >= 16 in the high nibble of qs[i - 16]
// An E2M1 code c (bit 3 the sign) times the block's power of two: w = kv[c] * 2^(e - 128), where
// kv = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12} is ggml's doubled E2M1 table (so the
// scale is half of E8M0's 2^(e - 127)). ggml gives e = 255 no NaN meaning: it is 2^127 like any other
// exponent, and 12 x 2^127 overflows to inf (which our GGUF reader then refuses, naming the tensor).
#pragma once
#include <cstdint>

namespace ar::quant {

inline constexpr int64_t kGgmlMxfp4Block = 32;
inline constexpr int64_t kGgmlMxfp4BlockBytes = 17;

// n elements (a multiple of 32) from n / 32 blocks at src, bit-exact with ggml's dequantize_row_mxfp4
// (subnormal results included, whatever the thread's flush-to-zero mode: the values are built from
// their bits, not multiplied).
void ggml_mxfp4_dequantize(const uint8_t* src, float* dst, int64_t n);

// One element: E2M1 code c (0-15) of a block with exponent byte e.
float ggml_mxfp4_value(uint8_t e, uint8_t c);

}  // namespace ar::quant
