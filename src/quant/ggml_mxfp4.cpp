#include "quant/ggml_mxfp4.h"

#include <cstring>

namespace ar::quant {

float ggml_mxfp4_value(uint8_t e, uint8_t c) {
  // |kv| as M x 2^q with M in 1..12: the magnitude M x 2^(e - 128) has the binary exponent q + e - 128.
  static constexpr uint32_t kMag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const uint32_t m = kMag[c & 7], sign = c > 8 ? 0x80000000u : 0;
  if (m == 0) return 0.0f;  // codes 0 and 8: ggml's int8 0 times the scale, +0
  int q = 0;
  while ((m >> (q + 1)) != 0) ++q;  // the highest set bit of m
  const int biased = int(e) - 128 + q + 127;
  uint32_t bits;
  if (biased >= 255) bits = 0x7F800000u;                                   // overflow: inf, as ggml's product
  else if (biased >= 1) bits = uint32_t(biased) << 23 | ((m << (23 - q)) & 0x7FFFFFu);  // normal
  else bits = m << (int(e) - 128 + 149);                                    // subnormal: m x 2^(e-128) / 2^-149
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void ggml_mxfp4_dequantize(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlMxfp4Block; ++b) {
    const uint8_t* blk = src + b * kGgmlMxfp4BlockBytes;
    float* y = dst + b * kGgmlMxfp4Block;
    for (int j = 0; j < 16; ++j) {
      y[j] = ggml_mxfp4_value(blk[0], blk[1 + j] & 0x0F);
      y[j + 16] = ggml_mxfp4_value(blk[0], blk[1 + j] >> 4);
    }
  }
}

}  // namespace ar::quant
