// The sigmoid output gate on flat arrays (Qwen3-Next's gated attention): y = o sigmoid(g), and its
// backward do = dy sigmoid(g), dg = dy o sigmoid(g) (1 - sigmoid(g)); sigmoid(g) = 1 / (1 + exp(-g)) with
// exp from exp.cpp over blocks of kBlock elements, so the bits do not depend on the chunking.
// Reference: kernels/ref/output_gate_ref.h.
#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
constexpr int64_t kBlock = 256;

// fn(b, len, e) for blocks of [i0, i1), e[k] = exp(-g[b + k]).
template <class Fn>
void with_exp_neg(const float* g, int64_t i0, int64_t i1, Fn fn) {
  float e[kBlock];
  for (int64_t b = i0; b < i1; b += kBlock) {
    const int64_t len = std::min(kBlock, i1 - b);
    for (int64_t k = 0; k < len; ++k) e[k] = -g[b + k];
    exp_inplace(e, len);
    fn(b, len, e);
  }
}
}  // namespace

void output_gate_fwd(Context& ctx, const float* o, const float* g, float* y, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    with_exp_neg(g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      for (int64_t k = 0; k < len; ++k) y[b + k] = o[b + k] / (1.f + e[k]);
    });
  }, ThreadPool::grain(8));
}

void output_gate_bwd(Context& ctx, const float* dy, const float* o, const float* g, float* d_o, float* dg, int64_t n) {
  ctx.pool().parallel_for(n, [&](int64_t i0, int64_t i1) {
    with_exp_neg(g, i0, i1, [&](int64_t b, int64_t len, const float* e) {
      for (int64_t k = 0; k < len; ++k) {
        const float s = 1.f / (1.f + e[k]);
        d_o[b + k] = dy[b + k] * s;
        dg[b + k] = dy[b + k] * o[b + k] * s * (1.f - s);
      }
    });
  }, ThreadPool::grain(8));
}

}  // namespace ar::cpu
