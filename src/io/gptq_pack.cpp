#include "io/gptq_pack.h"

#include "core/error.h"

namespace ar {

std::vector<int32_t> gptq_pack_qweight(const std::vector<uint8_t>& codes, int64_t out, int64_t in, int bits) {
  if (bits != 2 && bits != 4 && bits != 8) fail(ErrorKind::Unsupported, std::to_string(bits) + "-bit GPTQ packing");
  const int64_t per = 32 / bits;
  if (in % per) fail(ErrorKind::InvalidInput, "input size " + std::to_string(in) + " is not a multiple of " + std::to_string(per));
  std::vector<int32_t> q(size_t(in / per * out), 0);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) {
      uint32_t& word = reinterpret_cast<uint32_t&>(q[size_t((i / per) * out + o)]);
      word |= uint32_t(codes[size_t(o * in + i)]) << (bits * (i % per));
    }
  return q;
}

std::vector<int32_t> gptq_pack_qzeros(const std::vector<int32_t>& zeros, int64_t groups, int64_t out, int bits) {
  const int64_t per = 32 / bits;
  const int64_t words = (out + per - 1) / per;
  std::vector<int32_t> z(size_t(groups * words), 0);
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < out; ++o) {
      uint32_t& word = reinterpret_cast<uint32_t&>(z[size_t(g * words + o / per)]);
      word |= (uint32_t(zeros[size_t(g * out + o)]) & mask) << (bits * (o % per));
    }
  return z;
}

uint32_t gptq_code(const int32_t* qweight, int64_t out, int bits, int64_t i, int64_t o) {
  const int64_t per = 32 / bits;
  return (uint32_t(qweight[(i / per) * out + o]) >> (bits * (i % per))) & ((1u << bits) - 1);
}

uint32_t gptq_zero(const int32_t* qzeros, int64_t out, int bits, int64_t g, int64_t o) {
  const int64_t per = 32 / bits, words = (out + per - 1) / per;
  return (uint32_t(qzeros[g * words + o / per]) >> (bits * (o % per))) & ((1u << bits) - 1);
}

}  // namespace ar
