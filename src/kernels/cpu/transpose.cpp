// Out-of-place transpose of a row-major bf16 matrix: dst[c, r] = src[r, c], src [rows, cols]. Tiles of
// kTile x kTile elements (a tile's rows and columns each stay in a few cache lines), transposed in 8 x 8
// blocks of 16-bit lanes with SSE2 unpacks (any x86-64), edges element by element; tile rows spread
// over the context's pool. A copy: the bits do not depend on the thread count.
#include <emmintrin.h>

#include <algorithm>

#include "kernels/cpu/bf16_ops.h"

namespace ar::cpu {

namespace {
// The 8 x 8 block at src (row stride ls) into dst (row stride ld), transposed.
void block8(const uint16_t* src, int64_t ls, uint16_t* dst, int64_t ld) {
  __m128i a[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * ls));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);  // rows 2i, 2i+1 interleaved: columns 0-3
    t[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);  // columns 4-7
  }
  for (int h = 0; h < 2; ++h)  // h: columns 0-3 or 4-7
    for (int q = 0; q < 2; ++q) {  // q: rows 0-3 or 4-7
      u[4 * h + 2 * q] = _mm_unpacklo_epi32(t[4 * q + h], t[4 * q + 2 + h]);
      u[4 * h + 2 * q + 1] = _mm_unpackhi_epi32(t[4 * q + h], t[4 * q + 2 + h]);
    }
  // u[4h + 2q + j]: rows 4q..4q+3 of columns 4h + 2j, 4h + 2j + 1.
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 2; ++j) {
      const __m128i lo = u[4 * h + j], hi = u[4 * h + 2 + j];
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (4 * h + 2 * j) * ld), _mm_unpacklo_epi64(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (4 * h + 2 * j + 1) * ld), _mm_unpackhi_epi64(lo, hi));
    }
}
}  // namespace

void transpose_bf16(Context& ctx, const uint16_t* src, uint16_t* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t tiles = (rows + kTile - 1) / kTile;
  ctx.pool().parallel_for(tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t r0 = t0 * kTile; r0 < std::min(rows, t1 * kTile); r0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t c1 = std::min(cols, c0 + kTile);
        int64_t rb = r0;
        for (; rb + 8 <= r1; rb += 8) {
          int64_t cb = c0;
          for (; cb + 8 <= c1; cb += 8) block8(src + rb * cols + cb, cols, dst + cb * rows + rb, rows);
          for (int64_t c = cb; c < c1; ++c)
            for (int64_t r = rb; r < rb + 8; ++r) dst[c * rows + r] = src[r * cols + c];
        }
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = rb; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
      }
    }
  }, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, kTile * cols)));
}

}  // namespace ar::cpu
