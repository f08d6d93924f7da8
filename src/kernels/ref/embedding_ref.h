// Reference embedding lookup: out[r, :] = E[ids[r], :]; backward dE[ids[r], :] += dout[r, :].
// ids must be in [0, vocab); callers validate (the model layer reports bad ids with their position).
#pragma once
#include <cstdint>

namespace ar::ref {
template <class T>
void embedding_fwd(const T* E, const int32_t* ids, T* out, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c) out[r * dim + c] = E[int64_t(ids[r]) * dim + c];
}
template <class T>
void embedding_bwd(const T* dout, const int32_t* ids, T* dE, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c) dE[int64_t(ids[r]) * dim + c] += dout[r * dim + c];
}
}  // namespace ar::ref
