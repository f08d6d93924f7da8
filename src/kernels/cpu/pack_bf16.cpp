// A weight W [out, in] (bf16, row-major) written straight into oneDNN's blocked B layout "BA16a64b2a"
// of its bf16 brgemm matmul, the layout it picks for B [K, N] on AVX512_BF16 CPUs: B is cut into
// blocks of 32 K x 64 N (N-blocks outermost, K-blocks inside, 2048 elements each); inside a block,
// element (k, n) sits at ((k % 32) / 2) * 128 + (n % 64) * 2 + k % 2, pairs of consecutive k
// adjacent (the VNNI pairs the dot product reads). Both GEMM operands of a Linear come from W:
//   forward  y = x W^T:  B = W^T, B[k = i][n = o] = W[o][i]   (pack_wt_blocked)
//   backward dx = dy W:  B = W,   B[k = o][n = i] = W[o][i]   (pack_w_blocked)
// In 32-bit units (a k-pair), a block of the first is a 64 x 16 transpose of W's pairs and a block of
// the second interleaves pairs of W's rows. One pass over W each, spread over the pool by N-blocks:
// this replaces a transpose plus oneDNN's reorder. PackedB checks the layout oneDNN asks for before
// using these (matmul_dnnl.cpp) and tests compare the bytes with oneDNN's reorder.
#include <cstring>

#include "kernels/cpu/bf16_ops.h"

namespace ar::cpu {

namespace {
constexpr int64_t kBlockK = 32, kBlockN = 64, kBlock = kBlockK * kBlockN;
}  // namespace

bool blocked_layout_fits(int64_t K, int64_t N) { return K > 0 && N > 0 && K % kBlockK == 0 && N % kBlockN == 0; }

void pack_wt_blocked(Context& ctx, const uint16_t* W, int64_t out, int64_t in, uint16_t* dst) {
  const int64_t K = in;  // B = W^T: N-blocks are 64 rows of W
  ctx.pool().parallel_for(out / kBlockN, [&](int64_t b0, int64_t b1) {
    for (int64_t nb = b0; nb < b1; ++nb)
      for (int64_t kb = 0; kb < K / kBlockK; ++kb) {
        uint32_t* d = reinterpret_cast<uint32_t*>(dst + nb * K * kBlockN + kb * kBlock);
        for (int64_t r = 0; r < kBlockN; ++r) {  // row o = nb * 64 + r of W: 16 pairs of columns
          uint32_t row[kBlockK / 2];
          std::memcpy(row, W + (nb * kBlockN + r) * in + kb * kBlockK, sizeof row);
          for (int64_t p = 0; p < kBlockK / 2; ++p) d[p * kBlockN + r] = row[p];
        }
      }
  }, 1);
}

void pack_w_blocked(Context& ctx, const uint16_t* W, int64_t out, int64_t in, uint16_t* dst) {
  const int64_t K = out;  // B = W: N-blocks are 64 columns of W, K-blocks 32 rows
  ctx.pool().parallel_for(in / kBlockN, [&](int64_t b0, int64_t b1) {
    for (int64_t nb = b0; nb < b1; ++nb)
      for (int64_t kb = 0; kb < K / kBlockK; ++kb) {
        uint16_t* d = dst + nb * K * kBlockN + kb * kBlock;
        for (int64_t p = 0; p < kBlockK / 2; ++p) {  // rows o = kb * 32 + 2p, 2p + 1 interleaved
          const uint16_t* r0 = W + (kb * kBlockK + 2 * p) * in + nb * kBlockN;
          const uint16_t* r1 = r0 + in;
          uint16_t* q = d + p * 2 * kBlockN;
          for (int64_t n = 0; n < kBlockN; ++n) {
            q[2 * n] = r0[n];
            q[2 * n + 1] = r1[n];
          }
        }
      }
  }, 1);
}

}  // namespace ar::cpu
