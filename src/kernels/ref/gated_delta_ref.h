// Reference gated delta rule (Gated DeltaNet's linear attention: Qwen3-Next, Qwen3.5), the sequential
// recurrence transformers' torch_recurrent_gated_delta_rule computes. Per batch row b and value head h a
// state S [Dk, Dv] starts at zero (or `initial_state`); for each token t:
//   S <- exp(g_t) S                 (decay; g <= 0 in the models: -exp(A_log) softplus(a + dt_bias))
//   u_t = S^T k_t                   (what the state recalls for k_t)
//   d_t = beta_t (v_t - u_t)        (the delta rule's correction, beta in (0, 1))
//   S <- S + k_t d_t^T
//   o_t = S^T q_t
// Layouts: q, k [B, T, Hk, Dk] (l2-normalized and q scaled by Dk^-1/2 by the caller), v, o [B, T, Hv, Dv],
// g, beta [B, T, Hv]; Hv is a multiple of Hk and value head h reads key head h / (Hv / Hk) (transformers'
// repeat_interleave). The backward keeps every state of the sequence (T Dk Dv per head: a reference for
// tests, not for long sequences) and returns each input's gradient; dq and dk sum over the value heads
// that share a key head.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ar::ref {

struct DeltaShape {
  int64_t B, T, Hk, Hv, Dk, Dv;
  int64_t group() const { return Hv / Hk; }
  size_t qk_at(int64_t b, int64_t t, int64_t hk) const { return size_t(((b * T + t) * Hk + hk) * Dk); }
  size_t v_at(int64_t b, int64_t t, int64_t h) const { return size_t(((b * T + t) * Hv + h) * Dv); }
  size_t g_at(int64_t b, int64_t t, int64_t h) const { return size_t((b * T + t) * Hv + h); }
  size_t state_at(int64_t b, int64_t h) const { return size_t((b * Hv + h) * Dk * Dv); }
};

// o [B, T, Hv, Dv]; final_state (optional) [B, Hv, Dk, Dv] gets the state after the last token.
template <class T>
void gated_delta_fwd(const DeltaShape& s, const T* q, const T* k, const T* v, const T* g, const T* beta, T* o,
                     const T* initial_state = nullptr, T* final_state = nullptr) {
  std::vector<T> S(size_t(s.Dk * s.Dv)), u(size_t(s.Dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hv; ++h) {
      for (size_t i = 0; i < S.size(); ++i) S[i] = initial_state ? initial_state[s.state_at(b, h) + i] : T(0);
      for (int64_t t = 0; t < s.T; ++t) {
        const T* qt = q + s.qk_at(b, t, h / s.group());
        const T* kt = k + s.qk_at(b, t, h / s.group());
        const T* vt = v + s.v_at(b, t, h);
        const T a = std::exp(g[s.g_at(b, t, h)]), bt = beta[s.g_at(b, t, h)];
        for (T& x : S) x *= a;
        for (int64_t j = 0; j < s.Dv; ++j) {
          T acc = 0;
          for (int64_t i = 0; i < s.Dk; ++i) acc += S[size_t(i * s.Dv + j)] * kt[i];
          u[size_t(j)] = bt * (vt[j] - acc);  // d_t
        }
        for (int64_t i = 0; i < s.Dk; ++i)
          for (int64_t j = 0; j < s.Dv; ++j) S[size_t(i * s.Dv + j)] += kt[i] * u[size_t(j)];
        T* ot = o + s.v_at(b, t, h);
        for (int64_t j = 0; j < s.Dv; ++j) {
          T acc = 0;
          for (int64_t i = 0; i < s.Dk; ++i) acc += S[size_t(i * s.Dv + j)] * qt[i];
          ot[j] = acc;
        }
      }
      if (final_state)
        for (size_t i = 0; i < S.size(); ++i) final_state[s.state_at(b, h) + i] = S[i];
    }
}

// Gradients of <dO, o> for the forward above from a zero initial state: dq, dk [B, T, Hk, Dk], dv
// [B, T, Hv, Dv], dg, dbeta [B, T, Hv] (all written, not accumulated).
template <class T>
void gated_delta_bwd(const DeltaShape& s, const T* dO, const T* q, const T* k, const T* v, const T* g, const T* beta,
                     T* dq, T* dk, T* dv, T* dg, T* dbeta) {
  const size_t DS = size_t(s.Dk * s.Dv);
  for (size_t i = 0; i < size_t(s.B * s.T * s.Hk * s.Dk); ++i) dq[i] = dk[i] = 0;
  std::vector<T> states(size_t(s.T + 1) * DS), delta(size_t(s.T * s.Dv)), resid(size_t(s.T * s.Dv)), G(DS), tilde(DS);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hv; ++h) {
      const int64_t hk = h / s.group();
      // Forward, keeping S_t (states[t + 1]), d_t and v_t - u_t.
      std::fill(states.begin(), states.begin() + std::ptrdiff_t(DS), T(0));
      for (int64_t t = 0; t < s.T; ++t) {
        const T* kt = k + s.qk_at(b, t, hk);
        const T* vt = v + s.v_at(b, t, h);
        const T a = std::exp(g[s.g_at(b, t, h)]), bt = beta[s.g_at(b, t, h)];
        const T* prev = &states[size_t(t) * DS];
        T* cur = &states[size_t(t + 1) * DS];
        for (size_t i = 0; i < DS; ++i) cur[i] = a * prev[i];
        for (int64_t j = 0; j < s.Dv; ++j) {
          T acc = 0;
          for (int64_t i = 0; i < s.Dk; ++i) acc += cur[size_t(i * s.Dv + j)] * kt[i];
          resid[size_t(t * s.Dv + j)] = vt[j] - acc;
          delta[size_t(t * s.Dv + j)] = bt * (vt[j] - acc);
        }
        for (int64_t i = 0; i < s.Dk; ++i)
          for (int64_t j = 0; j < s.Dv; ++j) cur[size_t(i * s.Dv + j)] += kt[i] * delta[size_t(t * s.Dv + j)];
      }
      // Backward: G = dL/dS_t, carried from the last token to the first.
      std::fill(G.begin(), G.end(), T(0));
      for (int64_t t = s.T - 1; t >= 0; --t) {
        const T* qt = q + s.qk_at(b, t, hk);
        const T* kt = k + s.qk_at(b, t, hk);
        const T* dot = dO + s.v_at(b, t, h);
        const T a = std::exp(g[s.g_at(b, t, h)]), bt = beta[s.g_at(b, t, h)];
        const T* prev = &states[size_t(t) * DS];
        const T* cur = &states[size_t(t + 1) * DS];
        T* dqt = dq + s.qk_at(b, t, hk);
        T* dkt = dk + s.qk_at(b, t, hk);
        for (int64_t i = 0; i < s.Dk; ++i)
          for (int64_t j = 0; j < s.Dv; ++j) {
            G[size_t(i * s.Dv + j)] += qt[i] * dot[j];       // o_t = S_t^T q_t
            dqt[i] += cur[size_t(i * s.Dv + j)] * dot[j];
          }
        // S_t = tilde + k d^T, tilde = a S_{t-1}; d = beta (v - tilde^T k).
        for (size_t i = 0; i < DS; ++i) tilde[i] = a * prev[i];
        T dbt = 0;
        for (int64_t j = 0; j < s.Dv; ++j) {
          T dd = 0;
          for (int64_t i = 0; i < s.Dk; ++i) dd += G[size_t(i * s.Dv + j)] * kt[i];
          dv[s.v_at(b, t, h) + size_t(j)] = bt * dd;
          dbt += dd * resid[size_t(t * s.Dv + j)];
          for (int64_t i = 0; i < s.Dk; ++i) dkt[i] += G[size_t(i * s.Dv + j)] * delta[size_t(t * s.Dv + j)];
          const T du = -bt * dd;  // u = tilde^T k
          for (int64_t i = 0; i < s.Dk; ++i) {
            dkt[i] += tilde[size_t(i * s.Dv + j)] * du;
            G[size_t(i * s.Dv + j)] += kt[i] * du;  // now dL/dtilde
          }
        }
        dbeta[s.g_at(b, t, h)] = dbt;
        T da = 0;
        for (size_t i = 0; i < DS; ++i) da += G[i] * prev[i];
        dg[s.g_at(b, t, h)] = a * da;
        for (T& x : G) x *= a;  // dL/dS_{t-1}
      }
    }
}

}  // namespace ar::ref
