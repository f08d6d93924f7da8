// GPTQ-layout packing of integer codes (autoround-spec.md §8), used by auto_round and auto_gptq:
//   qweight int32 [in*b/32, out]: each column is a little-endian stream of b-bit fields, input row i
//           at bits [b*i, b*i + b) (b in {2, 3, 4, 8}; for 3 bits fields straddle words, GPTQ's
//           10+1+10+1+10 layout);
//   qzeros  int32 [groups, ceil(out*b/32)]: zero points in the same stream form along out
//           (auto_round:auto_gptq stores zp - 1);
//   scales  fp16 [groups, out].
// Codes u are unsigned: u = q + 2^(b-1) for symmetric, q for asymmetric.
#pragma once
#include <cstdint>
#include <vector>

namespace ar {

// codes [out, in] (row-major, one code per weight) -> qweight [in*b/32, out].
std::vector<int32_t> gptq_pack_qweight(const std::vector<uint8_t>& codes, int64_t out, int64_t in, int bits);
// zeros [groups, out] -> qzeros [groups, out*b/32].
std::vector<int32_t> gptq_pack_qzeros(const std::vector<int32_t>& zeros, int64_t groups, int64_t out, int bits);
// Inverses (the loader dequantizes with these).
uint32_t gptq_code(const int32_t* qweight, int64_t out, int bits, int64_t i, int64_t o);
uint32_t gptq_zero(const int32_t* qzeros, int64_t out, int bits, int64_t g, int64_t o);

}  // namespace ar

namespace ar {
// AWQ (WQLinear_GEMM) layout, 4-bit: qweight int32 [in, out/8]; within each group of 8 output
// columns, column j sits in nibble kAwqNibble[j] = {0, 4, 1, 5, 2, 6, 3, 7}[j]; qzeros int32
// [groups, out/8] in the same order (zero points stored as is); scales fp16 [groups, out].
std::vector<int32_t> awq_pack_rows(const std::vector<uint8_t>& values, int64_t rows, int64_t out);  // values [rows, out]
uint32_t awq_get(const int32_t* packed, int64_t out, int64_t row, int64_t o);
}  // namespace ar
