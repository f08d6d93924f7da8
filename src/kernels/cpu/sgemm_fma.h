// Our own fp32 GEMM for the AVX2 level: C = alpha op(A) op(B) + beta C (+ addends), where every element
// of the product is ONE fused multiply-add chain over k = 0, 1, ..., K-1 starting from zero:
//   p = fma(a[i,K-1], b[K-1,j], ... fma(a[i,1], b[1,j], a[i,0] * b[0,j]))
//   c = (beta == 0 ? alpha p : beta c + alpha p), then c += add[0], c += add[1], ... (one rounding each)
// so an element's bits depend on its row of op(A), its column of op(B) and K only: not on M, N, the
// blocking, the thread count or which rows share a call. `sgemm_fma_ref` is that definition as a plain
// loop; the AVX2 kernel gives its bits exactly (tests/test_sgemm_fma.cpp). It is the usual blocked
// design: blocks of up to 288 rows x 256 columns, K in equal slices up to 256 deep; per slice op(B)
// packed as 16-column panels (and a transposed op(A) as 6-row panels; op(A) = A is read in place);
// a 6 x 16 register tile runs over a slice, resuming from the last slice's sums (kept exactly, in
// fp32, in the scratch), and the last slice finishes C from the registers.
//
// Why: below AVX-512, OpenBLAS's Haswell kernel packs both operands on every call; the tuning's
// 256-token leaves (M = 256) spent ~12% of their time packing and two threads packed the same operand
// (bench/gemm_bench, tune_bench under AR_CPU_ISA=avx2). Here op(A) is never packed and the units are
// free to follow the thread count, since the bits do not depend on them. Measured in
// docs/benchmarks.md ("ISA levels").
#pragma once
#include <cstdint>
#include <span>

namespace ar::cpu {

struct SgemmFmaArgs {
  bool ta = false, tb = false;  // op(A) = A^T, op(B) = B^T (row-major storage)
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.f;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.f;
  float* C = nullptr;
  int64_t ldc = 0;
  std::span<const float* const> add = {};  // laid out as C (ldc), indexed by the element's offset from C
  // op(B) packed whole beforehand (sgemm_fma_pack_b_avx2's layout), read instead of B: the call packs
  // nothing of op(B). Column ranges given to sgemm_fma_avx2 then start on multiples of 16.
  const float* packed_b = nullptr;
};

// op(B) whole as the kernel's panels, packed once for many products that read it (a weight read by
// every leaf of a tuning iteration): per K slice (cut as the kernel cuts K, from K alone), its 16-column
// panels in order, each [kc][16] with zeros past N. The product's bits are those of the unpacked call:
// the pack is a copy. sgemm_fma_packed_floats(K, N) floats; sgemm_fma_pack_b_avx2 writes panels
// [p0, p1) of op(B) given by g (tb, K, N, B, ldb) into the whole buffer dst, on the calling thread.
int64_t sgemm_fma_packed_floats(int64_t K, int64_t N);
void sgemm_fma_pack_b_avx2(const SgemmFmaArgs& g, int64_t p0, int64_t p1, float* dst);

// Floats of scratch one sgemm_fma_avx2 call needs for depth K, whatever its block (at most 1.1 MiB).
int64_t sgemm_fma_scratch(int64_t K);
// Rows [m0, m1) and columns [n0, n1) of C on the calling thread (addends and C at the same offsets),
// with sgemm_fma_scratch(K) floats of scratch.
void sgemm_fma_avx2(const SgemmFmaArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* scratch);
// The definition, one element at a time (std::fma): the reference for the kernel's bits.
void sgemm_fma_ref(const SgemmFmaArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

}  // namespace ar::cpu
