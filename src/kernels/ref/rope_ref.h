// Reference rotary embedding over `dims` elements of each head of x [rows, heads, stride], starting at
// `off` (RopeDims; partial RoPE rotates a head's first dims, MLA its last qk_rope_head_dim). Pairs (a, b):
// HF's rotate_half layout (i, i + dims/2), or interleaved (2i, 2i + 1) (DeepSeek's rope_interleave: the
// same scores as transformers' de-interleaved output, since q and k are permuted alike). With
// c = cos[pos, i], s = sin[pos, i], i < dims/2:
//   y[a] = x[a] c - x[b] s,   y[b] = x[b] c + x[a] s
// Backward is the inverse rotation. pos[r] indexes the [maxpos, dims/2] tables.
// The unit (one head of one row, in place) is AR_HD: kernels/cuda/rope.cu runs it one thread each.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace ar {

struct RopeDims {
  int64_t stride = 0;        // a head's width in x
  int64_t off = 0;           // its first rotated element
  int64_t dims = 0;          // rotated elements (even)
  bool interleaved = false;  // pairs (2i, 2i + 1) rather than (i, i + dims/2)
  // The whole head of width D, rotate_half pairs (Llama).
  static RopeDims full(int64_t D) { return {D, 0, D, false}; }
};

}  // namespace ar

namespace ar::ref {

// Rotates head h of row r; inverse = true is the backward's rotation.
template <class T>
AR_HD void rope_head(T* x, const int32_t* pos, const T* cos, const T* sin, int64_t r, int64_t h, int64_t heads,
                     const RopeDims& d, bool inverse) {
  const int64_t h2 = d.dims / 2, step = d.interleaved ? 2 : 1, other = d.interleaved ? 1 : h2;
  T* v = x + (r * heads + h) * d.stride + d.off;
  const T* c = cos + int64_t(pos[r]) * h2;
  const T* s = sin + int64_t(pos[r]) * h2;
  for (int64_t i = 0; i < h2; ++i) {
    T* pa = v + i * step;
    T* pb = pa + other;
    T a = *pa, b = *pb;
    if (inverse) {
      *pa = a * c[i] + b * s[i];
      *pb = b * c[i] - a * s[i];
    } else {
      *pa = a * c[i] - b * s[i];
      *pb = b * c[i] + a * s[i];
    }
  }
}

template <class T>
void rope_fwd(T* x, const int32_t* pos, const T* cos, const T* sin, int64_t rows, int64_t heads, const RopeDims& d) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) rope_head(x, pos, cos, sin, r, h, heads, d, false);
}

template <class T>
void rope_bwd(T* dx, const int32_t* pos, const T* cos, const T* sin, int64_t rows, int64_t heads, const RopeDims& d) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) rope_head(dx, pos, cos, sin, r, h, heads, d, true);
}

}  // namespace ar::ref
