// The gated delta rule (kernels/ref/gated_delta_ref.h) in fp32: one work item per (batch row, key head),
// which runs the value heads that share that key head in order, so dq and dk are summed on one thread
// (the same bits on any thread count). Per token the state is read twice: once for u = a S^T k, once to
// apply S <- a S + k d^T and accumulate o = S^T q in the same pass. Inner loops run over Dv (contiguous).
//
// Memory: the forward keeps the state at the start of every kDeltaChunk-token chunk (the checkpoints,
// gated_delta_checkpoint_floats); the backward recomputes one chunk's states from its checkpoint
// (kDeltaChunk + 1 states of Dk x Dv per item in flight) and walks it backwards. Rebuilding S_{t-1} from
// S_t instead would divide by exp(g_t), which is unbounded as the decay nears 0.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
using ref::DeltaShape;

Tensor scratch(Context& ctx, int64_t n) { return Tensor::empty({std::max<int64_t>(n, 1)}, DType::F32, ctx); }

// sum_j x[j] y[j] in kLanes interleaved partial sums added in lane order: a fixed order the compiler
// vectorizes (a plain running sum is one dependency chain, which it may not reorder).
constexpr int kLanes = 16;
[[gnu::always_inline]] inline float dot_lanes(const float* x, const float* y, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l] * y[j + l];
  for (int l = 0; j < n; ++j, ++l) acc[l] += x[j] * y[j];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

int64_t chunks_of(const DeltaShape& s) { return (s.T + kDeltaChunk - 1) / kDeltaChunk; }

// One token: S <- a S + k d^T with d = beta (v - a S^T k); o = S^T q (o may be null). u: Dv scratch.
[[gnu::always_inline]] inline void token_step_body(const DeltaShape& s, float* S, const float* q, const float* k,
                                                   const float* v, float a, float beta, float* u, float* o,
                                                   float* d_out, float* resid_out) {
  const int64_t Dk = s.Dk, Dv = s.Dv;
  std::fill(u, u + Dv, 0.f);
  for (int64_t i = 0; i < Dk; ++i) {
    const float* row = S + i * Dv;
    const float ki = k[i];
    for (int64_t j = 0; j < Dv; ++j) u[j] += row[j] * ki;
  }
  for (int64_t j = 0; j < Dv; ++j) {
    const float r = v[j] - a * u[j];
    if (resid_out) resid_out[j] = r;
    u[j] = beta * r;  // d
  }
  if (d_out) std::copy(u, u + Dv, d_out);
  if (o) std::fill(o, o + Dv, 0.f);
  for (int64_t i = 0; i < Dk; ++i) {
    float* row = S + i * Dv;
    const float ki = k[i];
    for (int64_t j = 0; j < Dv; ++j) row[j] = a * row[j] + ki * u[j];
    if (!o) continue;
    const float qi = q[i];
    for (int64_t j = 0; j < Dv; ++j) o[j] += row[j] * qi;
  }
}

// Runs (batch row b, key head hk) for each item; fn(b, h) per value head of the group, in order.
template <class Fn>
void for_items(Context& ctx, const DeltaShape& s, Fn fn) {
  const int64_t per_item = s.T * s.group() * s.Dk * s.Dv;
  ctx.pool().parallel_for(s.B * s.Hk, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it)
      for (int64_t h = (it % s.Hk) * s.group(); h < (it % s.Hk + 1) * s.group(); ++h) fn(it / s.Hk, h);
  }, ThreadPool::grain(per_item));
}

// The backward of one chunk [t0, t1) of value head h: states[t - t0] = S_{t-1} (states[t1 - t0] = S_{t1-1}),
// G = dL/dS_{t1-1} on entry and dL/dS_{t0-1} on exit.
struct ChunkBuffers {
  float *states, *delta, *resid, *G, *u;
};
[[gnu::always_inline]] inline void chunk_backward_body(const DeltaShape& s, int64_t b, int64_t h, int64_t t0,
                                                       int64_t t1, const ChunkBuffers& c, const float* dO,
                                                       const float* q, const float* k, const float* g,
                                                       const float* beta, float* dq, float* dk, float* dv, float* dg,
                                                       float* dbeta) {
  const int64_t Dk = s.Dk, Dv = s.Dv, DS = Dk * Dv, hk = h / s.group();
  float* G = c.G;
  for (int64_t t = t1 - 1; t >= t0; --t) {
    const float* qt = q + s.qk_at(b, t, hk);
    const float* kt = k + s.qk_at(b, t, hk);
    const float* dot = dO + s.v_at(b, t, h);
    const float a = std::exp(g[s.g_at(b, t, h)]), bt = beta[s.g_at(b, t, h)];
    const float* prev = c.states + (t - t0) * DS;
    const float* cur = c.states + (t - t0 + 1) * DS;
    const float* dt = c.delta + (t - t0) * Dv;
    const float* rt = c.resid + (t - t0) * Dv;
    float* dqt = dq + s.qk_at(b, t, hk);
    float* dkt = dk + s.qk_at(b, t, hk);
    float* dd = c.u;
    std::fill(dd, dd + Dv, 0.f);
    for (int64_t i = 0; i < Dk; ++i) {  // G += q do^T; dq = S_t do; dd = G^T k; dk += G d
      float* Gi = G + i * Dv;
      const float qi = qt[i], ki = kt[i];
      for (int64_t j = 0; j < Dv; ++j) {
        Gi[j] += qi * dot[j];
        dd[j] += Gi[j] * ki;
      }
      dqt[i] += dot_lanes(cur + i * Dv, dot, Dv);
      dkt[i] += dot_lanes(Gi, dt, Dv);
    }
    float db = 0;
    float* dvt = dv + s.v_at(b, t, h);
    for (int64_t j = 0; j < Dv; ++j) {
      dvt[j] = bt * dd[j];
      db += dd[j] * rt[j];
      dd[j] *= -bt;  // du, u = (a S_{t-1})^T k
    }
    dbeta[s.g_at(b, t, h)] = db;
    float da = 0;
    for (int64_t i = 0; i < Dk; ++i) {  // dk += a S_{t-1} du; G += k du^T (dL/d(a S_{t-1})); da; G *= a
      float* Gi = G + i * Dv;
      const float* Pi = prev + i * Dv;
      const float ki = kt[i];
      dkt[i] += a * dot_lanes(Pi, dd, Dv);
      for (int64_t j = 0; j < Dv; ++j) Gi[j] += ki * dd[j];
      da += dot_lanes(Gi, Pi, Dv);
      for (int64_t j = 0; j < Dv; ++j) Gi[j] *= a;
    }
    dg[s.g_at(b, t, h)] = a * da;
  }
}

// The bodies compiled at the build's baseline (AVX2 and FMA) and for AVX-512 (16 lanes per vector),
// chosen by the kernel ISA level (kernels/cpu/isa.h).
#if defined(__clang__)  // clang takes no vector-width preference in a target attribute
#define AR_DELTA_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))
#else
#define AR_DELTA_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512")))
#endif
#define AR_DELTA_STEP_ARGS                                                                                 \
  const DeltaShape &s, float *S, const float *q, const float *k, const float *v, float a, float beta, float *u, \
      float *o, float *d_out, float *resid_out
#define AR_DELTA_BWD_ARGS                                                                                       \
  const DeltaShape &s, int64_t b, int64_t h, int64_t t0, int64_t t1, const ChunkBuffers &c, const float *dO,      \
      const float *q, const float *k, const float *g, const float *beta, float *dq, float *dk, float *dv, float *dg, \
      float *dbeta
void token_step_base(AR_DELTA_STEP_ARGS) { token_step_body(s, S, q, k, v, a, beta, u, o, d_out, resid_out); }
AR_DELTA_AVX512 void token_step_avx512(AR_DELTA_STEP_ARGS) {
  token_step_body(s, S, q, k, v, a, beta, u, o, d_out, resid_out);
}
void chunk_backward_base(AR_DELTA_BWD_ARGS) { chunk_backward_body(s, b, h, t0, t1, c, dO, q, k, g, beta, dq, dk, dv, dg, dbeta); }
AR_DELTA_AVX512 void chunk_backward_avx512(AR_DELTA_BWD_ARGS) {
  chunk_backward_body(s, b, h, t0, t1, c, dO, q, k, g, beta, dq, dk, dv, dg, dbeta);
}
#undef AR_DELTA_AVX512
#undef AR_DELTA_STEP_ARGS
#undef AR_DELTA_BWD_ARGS
bool use_avx512() { return kernel_isa() >= Isa::avx512; }
}  // namespace

int64_t gated_delta_checkpoint_floats(const DeltaShape& s) { return s.B * s.Hv * chunks_of(s) * s.Dk * s.Dv; }

void gated_delta_fwd(Context& ctx, const DeltaShape& s, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, float* o, float* checkpoints, const float* initial_state, float* final_state) {
  const int64_t DS = s.Dk * s.Dv, nc = chunks_of(s);
  const auto step = use_avx512() ? token_step_avx512 : token_step_base;
  for_items(ctx, s, [&](int64_t b, int64_t h) {
    Tensor S = scratch(ctx, DS), u = scratch(ctx, s.Dv);
    float* St = S.f32();
    if (initial_state) std::copy(initial_state + s.state_at(b, h), initial_state + s.state_at(b, h) + DS, St);
    else std::fill(St, St + DS, 0.f);
    const int64_t hk = h / s.group();
    for (int64_t t = 0; t < s.T; ++t) {
      if (checkpoints && t % kDeltaChunk == 0)
        std::copy(St, St + DS, checkpoints + ((b * s.Hv + h) * nc + t / kDeltaChunk) * DS);
      step(s, St, q + s.qk_at(b, t, hk), k + s.qk_at(b, t, hk), v + s.v_at(b, t, h), std::exp(g[s.g_at(b, t, h)]),
           beta[s.g_at(b, t, h)], u.f32(), o + s.v_at(b, t, h), nullptr, nullptr);
    }
    if (final_state) std::copy(St, St + DS, final_state + s.state_at(b, h));
  });
}

void gated_delta_bwd(Context& ctx, const DeltaShape& s, const float* dO, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const float* checkpoints, float* dq, float* dk, float* dv,
                     float* dg, float* dbeta) {
  const int64_t DS = s.Dk * s.Dv, nc = chunks_of(s), C = kDeltaChunk;
  const bool wide = use_avx512();
  const auto step = wide ? token_step_avx512 : token_step_base;
  const auto back = wide ? chunk_backward_avx512 : chunk_backward_base;
  std::fill(dq, dq + s.B * s.T * s.Hk * s.Dk, 0.f);
  std::fill(dk, dk + s.B * s.T * s.Hk * s.Dk, 0.f);
  for_items(ctx, s, [&](int64_t b, int64_t h) {
    Tensor states = scratch(ctx, (C + 1) * DS), delta = scratch(ctx, C * s.Dv), resid = scratch(ctx, C * s.Dv),
           G = scratch(ctx, DS), u = scratch(ctx, s.Dv);
    const ChunkBuffers c{states.f32(), delta.f32(), resid.f32(), G.f32(), u.f32()};
    std::fill(c.G, c.G + DS, 0.f);
    const int64_t hk = h / s.group();
    for (int64_t ci = nc - 1; ci >= 0; --ci) {
      const int64_t t0 = ci * C, t1 = std::min(s.T, t0 + C);
      const float* start = checkpoints + ((b * s.Hv + h) * nc + ci) * DS;
      std::copy(start, start + DS, c.states);
      for (int64_t t = t0; t < t1; ++t) {  // the chunk's states again, with d_t and v_t - u_t
        float* next = c.states + (t - t0 + 1) * DS;
        std::copy(next - DS, next, next);
        step(s, next, nullptr, k + s.qk_at(b, t, hk), v + s.v_at(b, t, h), std::exp(g[s.g_at(b, t, h)]),
                   beta[s.g_at(b, t, h)], c.u, nullptr, c.delta + (t - t0) * s.Dv, c.resid + (t - t0) * s.Dv);
      }
      back(s, b, h, t0, t1, c, dO, q, k, g, beta, dq, dk, dv, dg, dbeta);
    }
  });
}

}  // namespace ar::cpu
