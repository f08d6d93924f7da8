// Reference GEMM and Linear (plain loops, any float type; the truth for tests).
// gemm: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, leading dims given.
// linear: y[N,out] = x[N,in] * W[out,in]^T + b;  backward: dx = dy W (+= if accumulate),
// dW += dy^T x, db += sum_rows dy.
#pragma once
#include <cstdint>

namespace ar::ref {

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * acc + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
    }
}

template <class T>
void linear_fwd(const T* x, const T* W, const T* b, T* y, int64_t n, int64_t in, int64_t out) {
  gemm<T>(false, true, n, out, in, 1, x, in, W, in, 0, y, out);
  if (b)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] += b[o];
}

template <class T>
void linear_bwd(const T* dy, const T* x, const T* W, T* dx, bool accumulate_dx, T* dW, T* db, int64_t n, int64_t in,
                int64_t out) {
  if (dx) gemm<T>(false, false, n, in, out, 1, dy, out, W, in, accumulate_dx ? 1 : 0, dx, in);
  if (dW) gemm<T>(true, false, out, in, n, 1, dy, out, x, in, 1, dW, in);
  if (db)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) db[o] += dy[r * out + o];
}

}  // namespace ar::ref
