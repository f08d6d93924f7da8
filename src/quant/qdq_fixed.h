// Fake quantization with fixed per-group parameters: the GGUF types, whose scales and mins are
// double-quantized once before tuning (AutoRound's `_dq` wrapper: the search at iteration 0, then only
// the rounding V is tuned; autoround-spec.md §4), so that what is tuned is exactly what is written:
//   q = clamp(round((w + m) / s + V), qlo, qhi),  w^ = s q - m
// s (may be negative for the symmetric types) and m are per group of `group` columns, [out * groups];
// V is [out, groups * group] as in qdq_ref.h. In fp32 this equals ggml's decoding (d sc) q - (dmin mn)
// with s = d sc and m = dmin mn computed once in fp32.
// Backward (straight-through): dV = s dw^ where q is not clamped, 0 where it is; s and m get none.
#pragma once
#include <cstdint>

#include "core/context.h"
#include "quant/qdq_ref.h"

namespace ar::quant {

struct FixedQdq {
  int64_t out = 0, in = 0, group = 0;
  int qlo = 0, qhi = 0;
  int64_t groups() const { return in / group; }
};

template <class T, class Out = T>
void qdq_fixed_fwd(const FixedQdq& f, const T* W, const T* V, const T* s, const T* m, Out* What, int64_t r0,
                   int64_t r1) {
  const int64_t ng = f.groups();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const T sg = s[r * ng + g], mg = m[r * ng + g];
      for (int64_t c = g * f.group; c < (g + 1) * f.group; ++c) {
        T q = sg != T(0) ? round_half_even((W[r * f.in + c] + mg) / sg + (V ? V[r * f.in + c] : T(0))) : T(0);
        q = q < T(f.qlo) ? T(f.qlo) : q > T(f.qhi) ? T(f.qhi) : q;
        store_qdq(What + r * f.in + c, T(sg * q - mg));
      }
    }
}

template <class T>
void qdq_fixed_bwd(const FixedQdq& f, const T* W, const T* V, const T* s, const T* m, const T* dWhat, T* dV,
                   int64_t r0, int64_t r1) {
  const int64_t ng = f.groups();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      const T sg = s[r * ng + g], mg = m[r * ng + g];
      for (int64_t c = g * f.group; c < (g + 1) * f.group; ++c) {
        const T q = sg != T(0) ? round_half_even((W[r * f.in + c] + mg) / sg + (V ? V[r * f.in + c] : T(0))) : T(0);
        const bool in = q >= T(f.qlo) && q <= T(f.qhi);
        dV[r * f.in + c] = in ? dWhat[r * f.in + c] * sg : T(0);
      }
    }
}

// The same over rows in parallel on the context's pool (fp32; What in fp32 or bf16).
void qdq_fixed_fwd(Context& ctx, const FixedQdq& f, const float* W, const float* V, const float* s, const float* m,
                   float* What);
void qdq_fixed_fwd(Context& ctx, const FixedQdq& f, const float* W, const float* V, const float* s, const float* m,
                   uint16_t* What);

}  // namespace ar::quant
