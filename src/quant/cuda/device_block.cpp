#include "quant/cuda/device_block.h"

#include <algorithm>
#include <array>
#include <vector>

namespace ar::quant {

DeviceBlock upload_dense_block(cuda::DeviceContext& dev, const BlockWeights& w) {
  // The tensors of BlockPtrs that a dense block uses.
  using P = BlockPtrs<const float*>;
  static constexpr std::array<const float* P::*, 15> kDense = {&P::ln1, &P::wq,     &P::wk,     &P::wv, &P::bq,
                                                               &P::bk,  &P::bv,     &P::q_norm, &P::k_norm,
                                                               &P::wo,  &P::bo,     &P::ln2,    &P::wg, &P::wu,
                                                               &P::wd};
  DeviceBlock b;
  for (const Tensor* t : {&w.ln1, &w.wq, &w.wk, &w.wv, &w.bq, &w.bk, &w.bv, &w.q_norm, &w.k_norm, &w.wo, &w.bo,
                          &w.ln2, &w.wg, &w.wu, &w.wd})
    if (t->defined()) b.held[t->f32()] = dev.upload(t->f32(), t->numel());
  const P hp = w.ptrs();
  for (auto f : kDense)
    if (hp.*f) b.ptrs.*f = b.held.at(hp.*f).data();
  return b;
}

DeviceRope upload_rope(cuda::DeviceContext& dev, const BlockAux<float>& aux, int64_t samples, int64_t head_dim) {
  const int64_t T = aux.T, h2 = head_dim / 2;
  std::vector<int32_t> pos(static_cast<size_t>(samples * T));
  int32_t maxpos = 0;
  for (int64_t i = 0; i < samples * T; ++i) maxpos = std::max(maxpos, pos[size_t(i)] = aux.pos[i % T]);
  DeviceRope r;
  r.pos = dev.upload(pos.data(), int64_t(pos.size()));
  r.cos = dev.upload(aux.cos, int64_t(maxpos + 1) * h2);
  r.sin = dev.upload(aux.sin, int64_t(maxpos + 1) * h2);
  return r;
}

}  // namespace ar::quant
