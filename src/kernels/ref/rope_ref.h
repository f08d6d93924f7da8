// Reference rotary embedding, HF "rotate_half" layout: within each head of size D the pairs are
// (i, i + D/2), i < D/2. With c = cos[pos, i], s = sin[pos, i]:
//   y[i] = x[i] c - x[i+D/2] s,   y[i+D/2] = x[i+D/2] c + x[i] s
// Backward is the inverse rotation. x is [rows, heads, D]; pos[r] indexes the [maxpos, D/2] tables.
// The unit (one head of one row, in place) is AR_HD: kernels/cuda/rope.cu runs it one thread each.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace ar::ref {

// Rotates head h of row r; inverse = true is the backward's rotation.
template <class T>
AR_HD void rope_head(T* x, const int32_t* pos, const T* cos, const T* sin, int64_t r, int64_t h, int64_t heads,
                     int64_t D, bool inverse) {
  const int64_t h2 = D / 2;
  T* v = x + (r * heads + h) * D;
  const T* c = cos + int64_t(pos[r]) * h2;
  const T* s = sin + int64_t(pos[r]) * h2;
  for (int64_t i = 0; i < h2; ++i) {
    T a = v[i], b = v[i + h2];
    if (inverse) {
      v[i] = a * c[i] + b * s[i];
      v[i + h2] = b * c[i] - a * s[i];
    } else {
      v[i] = a * c[i] - b * s[i];
      v[i + h2] = b * c[i] + a * s[i];
    }
  }
}

template <class T>
void rope_fwd(T* x, const int32_t* pos, const T* cos, const T* sin, int64_t rows, int64_t heads, int64_t D) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) rope_head(x, pos, cos, sin, r, h, heads, D, false);
}

template <class T>
void rope_bwd(T* dx, const int32_t* pos, const T* cos, const T* sin, int64_t rows, int64_t heads, int64_t D) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) rope_head(dx, pos, cos, sin, r, h, heads, D, true);
}

}  // namespace ar::ref
