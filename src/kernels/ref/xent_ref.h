// Reference log-softmax and cross-entropy over logits [rows, V].
//   logp[r, v] = z[r, v] - logsumexp_v z[r, :]
//   loss = -(1/n) sum_{r: t_r >= 0} logp[r, t_r]   (t_r < 0, e.g. -100, is ignored; n = #counted)
// Backward: dz[r, v] = scale * (softmax(z)[r, v] - [v == t_r]) for counted rows, 0 otherwise;
// scale = dloss / n.
#pragma once
#include <cmath>
#include <cstdint>

namespace ar::ref {

template <class T>
T logsumexp(const T* z, int64_t V) {
  T mx = z[0];
  for (int64_t v = 1; v < V; ++v) mx = z[v] > mx ? z[v] : mx;
  T s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - mx);
  return mx + std::log(s);
}

template <class T>
void log_softmax(const T* z, T* logp, int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; ++r) {
    T lse = logsumexp(z + r * V, V);
    for (int64_t v = 0; v < V; ++v) logp[r * V + v] = z[r * V + v] - lse;
  }
}

// Returns the mean loss over counted rows (0 if none); dz (optional) gets d(mean loss)/dz * dloss.
template <class T>
T cross_entropy(const T* z, const int32_t* targets, T* dz, T dloss, int64_t rows, int64_t V) {
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) n += targets[r] >= 0;
  T total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* zr = z + r * V;
    T lse = logsumexp(zr, V);
    if (targets[r] >= 0) total += lse - zr[targets[r]];
    if (dz)
      for (int64_t v = 0; v < V; ++v)
        dz[r * V + v] = targets[r] < 0 ? T(0) : dloss / T(n) * (std::exp(zr[v] - lse) - T(v == targets[r]));
  }
  return n ? total / T(n) : T(0);
}

}  // namespace ar::ref
