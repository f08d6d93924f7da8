// How a mixture-of-experts feed-forward (model/moe_ffn.h) routes one token: from the router's logits l [E]
// to the chosen experts S_0..S_{K-1} and their weights w_k, and back from dL/dw to dL/dl with the choice
// held fixed (top-k has no gradient). Ties go to the lower expert (group) index; S is in descending order
// of the ranking score, which is the order the feed-forward sums the experts in.
//   SoftmaxTopK (Qwen2/3-MoE; Mixtral with norm_topk):  p = softmax(l);  S = top-K of p;
//     w = p[S], divided by sum_k p[S_k] when norm_topk
//   TopKSoftmax (gpt-oss):  S = top-K of l;  w = softmax(l[S])
//   SigmoidGroups (DeepSeek-V3, Kimi K2, GLM-4.5):  s = sigmoid(l);  c = s + b (b: the score-correction
//     bias, selection only);  the `topk_groups` groups (of E / groups experts) with the largest sum of
//     their two largest c;  S = top-K of c within them;  w = s[S] (/ (sum_k s[S_k] + 1e-20) when
//     norm_topk) * scaling
// `pr` holds the logits on entry and on return what backward reads: p, the logits, or s.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "model/block_dims.h"

namespace ar {

template <class T>
class MoeRouter {
 public:
  explicit MoeRouter(const MoeDims& m) : m_(m), order_(size_t(m.E)) {}

  // Routes one token: pr [E] as above; bias [E] (SigmoidGroups, may be null); idx [K] and wt [K] written.
  void route(T* pr, const T* bias, int32_t* idx, T* wt) {
    switch (m_.routing) {
      case Routing::SoftmaxTopK: return softmax_topk(pr, idx, wt);
      case Routing::TopKSoftmax: return topk_softmax(pr, idx, wt);
      case Routing::SigmoidGroups: return sigmoid_groups(pr, bias, idx, wt);
    }
  }

  // dl [E] (written) = dL/dl from dw [K] = dL/dw, with pr, idx and wt as route left them.
  void backward(const T* pr, const int32_t* idx, const T* wt, const T* dw, T* dl) const {
    const int64_t E = m_.E, K = m_.K;
    std::fill(dl, dl + E, T(0));
    T dot = 0;
    for (int64_t k = 0; k < K; ++k) dot += dw[k] * wt[k];
    if (m_.routing == Routing::TopKSoftmax) {
      for (int64_t k = 0; k < K; ++k) dl[idx[k]] = wt[k] * (dw[k] - dot);
      return;
    }
    if (m_.routing == Routing::SigmoidGroups) {
      T top = 0;
      for (int64_t k = 0; k < K; ++k) top += pr[idx[k]];
      const T sf = T(m_.scaling), den = top + T(1e-20);
      for (int64_t k = 0; k < K; ++k) {
        const T s = pr[idx[k]], ds = m_.norm_topk ? (sf * dw[k] - dot) / den : sf * dw[k];
        dl[idx[k]] = ds * s * (T(1) - s);
      }
      return;
    }
    T top = 0;
    for (int64_t k = 0; k < K; ++k) top += pr[idx[k]];
    for (int64_t k = 0; k < K; ++k)  // dL/dp of the chosen experts (dl holds dp for now)
      dl[idx[k]] = m_.norm_topk ? (dw[k] - dot) / top : dw[k];
    T pdp = 0;
    for (int64_t k = 0; k < K; ++k) pdp += dl[idx[k]] * pr[idx[k]];
    for (int64_t e = 0; e < E; ++e) dl[e] = pr[e] * (dl[e] - pdp);
  }

 private:
  // The K entries of `score` ranked first among `order_`'s, in descending order, ties to the lower index.
  void top_k(const T* score, int32_t* idx) {
    const int64_t K = m_.K;
    std::partial_sort(order_.begin(), order_.begin() + K, order_.end(),
                      [score](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    std::copy(order_.begin(), order_.begin() + K, idx);
  }

  void softmax_topk(T* pr, int32_t* idx, T* wt) {
    const int64_t E = m_.E, K = m_.K;
    const T mx = *std::max_element(pr, pr + E);
    T sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += pr[e] = std::exp(pr[e] - mx);
    for (int64_t e = 0; e < E; ++e) pr[e] /= sum;
    std::iota(order_.begin(), order_.end(), 0);
    top_k(pr, idx);
    T top = 0;
    for (int64_t k = 0; k < K; ++k) top += pr[idx[k]];
    for (int64_t k = 0; k < K; ++k) wt[k] = m_.norm_topk ? pr[idx[k]] / top : pr[idx[k]];
  }

  void topk_softmax(const T* pr, int32_t* idx, T* wt) {
    const int64_t K = m_.K;
    std::iota(order_.begin(), order_.end(), 0);
    top_k(pr, idx);
    const T mx = pr[idx[0]];
    T sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += wt[k] = std::exp(pr[idx[k]] - mx);
    for (int64_t k = 0; k < K; ++k) wt[k] /= sum;
  }

  void sigmoid_groups(T* pr, const T* bias, int32_t* idx, T* wt) {
    const int64_t E = m_.E, K = m_.K, G = m_.groups, per = E / G;
    choice_.resize(size_t(E));
    for (int64_t e = 0; e < E; ++e) {
      pr[e] = T(1) / (T(1) + std::exp(-pr[e]));
      choice_[size_t(e)] = pr[e] + (bias ? bias[e] : T(0));
    }
    // Each group's score: the sum of its two largest choice scores (its only one if it has one).
    group_score_.resize(size_t(G));
    for (int64_t g = 0; g < G; ++g) {
      const T* c = choice_.data() + g * per;
      const int64_t first = std::max_element(c, c + per) - c;
      T second = -INFINITY;
      for (int64_t i = 0; i < per; ++i)
        if (i != first) second = std::max(second, c[i]);
      group_score_[size_t(g)] = per > 1 ? c[first] + second : c[first];
    }
    std::vector<int32_t> groups(static_cast<size_t>(G));
    std::iota(groups.begin(), groups.end(), 0);
    const T* gs = group_score_.data();
    std::partial_sort(groups.begin(), groups.begin() + m_.topk_groups, groups.end(),
                      [gs](int32_t a, int32_t b) { return gs[a] > gs[b] || (gs[a] == gs[b] && a < b); });
    std::sort(groups.begin(), groups.begin() + m_.topk_groups);
    order_.clear();
    for (int64_t i = 0; i < m_.topk_groups; ++i)
      for (int64_t e = groups[size_t(i)] * per; e < (groups[size_t(i)] + 1) * per; ++e) order_.push_back(int32_t(e));
    top_k(choice_.data(), idx);
    order_.resize(size_t(E));
    T top = 0;
    for (int64_t k = 0; k < K; ++k) top += pr[idx[k]];
    const T den = top + T(1e-20);
    for (int64_t k = 0; k < K; ++k) wt[k] = (m_.norm_topk ? pr[idx[k]] / den : pr[idx[k]]) * T(m_.scaling);
  }

  MoeDims m_;
  std::vector<int32_t> order_;
  std::vector<T> choice_, group_score_;
};

}  // namespace ar
