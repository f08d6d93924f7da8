#include "io/gptq_pack.h"

#include "core/error.h"

namespace ar {

// Each column of codes is a little-endian bit stream of `bits`-bit fields cut into 32-bit words:
// value t occupies bits [bits*t, bits*t + bits). For 2/4/8 bits no field straddles a word; for 3
// bits this is GPTQ's 10 + 1 + 10 + 1 + 10 layout (32 values in 3 words).
namespace {
void put(uint32_t* words, int64_t stride, int64_t t, int bits, uint32_t v) {
  const int64_t bit = int64_t(bits) * t, w = bit / 32, sh = bit % 32;
  words[w * stride] |= v << sh;
  if (sh + bits > 32) words[(w + 1) * stride] |= v >> (32 - sh);
}
uint32_t get(const uint32_t* words, int64_t stride, int64_t t, int bits) {
  const int64_t bit = int64_t(bits) * t, w = bit / 32, sh = bit % 32;
  uint64_t v = words[w * stride] >> sh;
  if (sh + bits > 32) v |= uint64_t(words[(w + 1) * stride]) << (32 - sh);
  return uint32_t(v) & ((1u << bits) - 1);
}
void check_bits(int bits) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    fail(ErrorKind::Unsupported, std::to_string(bits) + "-bit GPTQ packing (2, 3, 4, 8)");
}
}  // namespace

std::vector<int32_t> gptq_pack_qweight(const std::vector<uint8_t>& codes, int64_t out, int64_t in, int bits) {
  check_bits(bits);
  if (in % 32) fail(ErrorKind::InvalidInput, "input size " + std::to_string(in) + " is not a multiple of 32");
  std::vector<int32_t> q(size_t(in * bits / 32 * out), 0);
  auto* words = reinterpret_cast<uint32_t*>(q.data());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) put(words + o, out, i, bits, codes[size_t(o * in + i)]);
  return q;
}

std::vector<int32_t> gptq_pack_qzeros(const std::vector<int32_t>& zeros, int64_t groups, int64_t out, int bits) {
  check_bits(bits);
  const int64_t words_per_row = (out * bits + 31) / 32;
  std::vector<int32_t> z(size_t(groups * words_per_row), 0);
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < out; ++o)
      put(reinterpret_cast<uint32_t*>(z.data()) + g * words_per_row, 1, o, bits, uint32_t(zeros[size_t(g * out + o)]) & mask);
  return z;
}

uint32_t gptq_code(const int32_t* qweight, int64_t out, int bits, int64_t i, int64_t o) {
  return get(reinterpret_cast<const uint32_t*>(qweight) + o, out, i, bits);
}

uint32_t gptq_zero(const int32_t* qzeros, int64_t out, int bits, int64_t g, int64_t o) {
  const int64_t words_per_row = (out * bits + 31) / 32;
  return get(reinterpret_cast<const uint32_t*>(qzeros) + g * words_per_row, 1, o, bits);
}

}  // namespace ar

namespace ar {
namespace {
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
}

std::vector<int32_t> awq_pack_rows(const std::vector<uint8_t>& values, int64_t rows, int64_t out) {
  if (out % 8) fail(ErrorKind::InvalidInput, "AWQ packing needs out % 8 == 0 (got " + std::to_string(out) + ")");
  std::vector<int32_t> p(size_t(rows * out / 8), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      uint32_t& w = reinterpret_cast<uint32_t&>(p[size_t(r * (out / 8) + o / 8)]);
      w |= (uint32_t(values[size_t(r * out + o)]) & 0xF) << (4 * kAwqNibble[o % 8]);
    }
  return p;
}

uint32_t awq_get(const int32_t* packed, int64_t out, int64_t row, int64_t o) {
  return (uint32_t(packed[row * (out / 8) + o / 8]) >> (4 * kAwqNibble[o % 8])) & 0xF;
}
}  // namespace ar
