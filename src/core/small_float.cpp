#include "core/small_float.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ar {
namespace {

// A sign-magnitude float code without Inf: `mbits` mantissa bits, exponent bias `bias`, largest
// finite magnitude `max` with code `max_code` (sign bit clear).
struct SmallFloat {
  int mbits, bias;
  float max;
  uint8_t max_code, sign_bit;
  int emin() const { return 1 - bias; }  // exponent of the smallest normal
};
constexpr SmallFloat kE2M1{1, 1, kE2M1Max, 0x7, 0x8};
constexpr SmallFloat kE4M3{3, 7, kE4M3Max, 0x7E, 0x80};

// Finite x -> code, round to nearest even, saturating.
uint8_t encode(const SmallFloat& f, float x) {
  const uint8_t sign = std::signbit(x) ? f.sign_bit : 0;
  const float a = std::fabs(x);
  if (a == 0.0f) return sign;
  if (!(a < f.max)) return sign | f.max_code;  // also +-Inf
  int ex = 0;
  std::frexp(a, &ex);                                   // a = m 2^ex, m in [0.5, 1)
  int e = ex - 1 < f.emin() ? f.emin() : ex - 1;        // binade of a, or the subnormal range
  const float step = std::ldexp(1.0f, e - f.mbits);     // grid spacing there
  auto r = int(std::nearbyint(a / step));               // a / step is exact: step is a power of two
  const int one = 1 << f.mbits;                         // r of the binade's first value
  if (r == 2 * one) {                                   // rounded up to the next binade
    r = one;
    ++e;
  }
  if (r < one) return sign | uint8_t(r);                // subnormal: exponent field 0
  const auto code = uint8_t(((e + f.bias) << f.mbits) | (r - one));
  return sign | (code > f.max_code ? f.max_code : code);
}

float decode(const SmallFloat& f, uint8_t c) {
  const int mask = (1 << f.mbits) - 1;
  const int m = c & mask, ef = (c & (f.sign_bit - 1)) >> f.mbits;
  const float mag = ef == 0 ? std::ldexp(float(m), f.emin() - f.mbits)
                            : std::ldexp(float(m + (1 << f.mbits)), ef - f.bias - f.mbits);
  return (c & f.sign_bit) ? -mag : mag;
}

}  // namespace

uint8_t e2m1_encode(float x) { return std::isnan(x) ? 0 : encode(kE2M1, x); }
float e2m1_decode(uint8_t c) { return decode(kE2M1, c & 0xF); }

uint8_t e4m3_encode(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  return encode(kE4M3, x);
}
float e4m3_decode(uint8_t c) {
  if ((c & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  return decode(kE4M3, c);
}

float e8m0_decode(uint8_t c) {
  if (c == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return pow2f(int(c) - 127);  // code 0 is 2^-127, a float subnormal
}

}  // namespace ar
