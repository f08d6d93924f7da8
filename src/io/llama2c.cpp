#include "io/llama2c.h"

#include <cstring>

#include "core/error.h"
#include "io/mapped_file.h"

namespace ar {

Llama2cCheckpoint read_llama2c(const std::string& path) {
  auto f = MappedFile::open(path);
  if (f->size() < 28) fail(ErrorKind::InvalidInput, path + ": truncated llama2.c checkpoint (no 28-byte header)");
  int32_t h[7];
  std::memcpy(h, f->data(), 28);
  Llama2cCheckpoint c;
  c.dim = h[0]; c.hidden_dim = h[1]; c.n_layers = h[2]; c.n_heads = h[3]; c.n_kv_heads = h[4];
  auto bad = [&](const std::string& m) { fail(ErrorKind::InvalidInput, path + ": " + m); };
  for (int i = 0; i < 7; ++i)
    if (h[i] == 0 || (i != 5 && h[i] < 0) || h[i] > (1 << 24) || h[i] < -(1 << 24))
      bad("implausible header field " + std::to_string(i) + " = " + std::to_string(h[i]));
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : -h[5];  // |h[5]| <= 2^24: no overflow
  c.seq_len = h[6];
  if (c.dim % c.n_heads) bad("dim " + std::to_string(c.dim) + " not divisible by n_heads");
  if (c.n_heads % c.n_kv_heads) bad("n_heads not divisible by n_kv_heads");
  const size_t hs = size_t(c.dim / c.n_heads), kv = hs * size_t(c.n_kv_heads), L = size_t(c.n_layers),
               D = size_t(c.dim), H = size_t(c.hidden_dim), V = size_t(c.vocab_size);
  if (hs % 2) bad("odd head size");
  // Each factor is at most 2^24, so a product of two fits; the products of three (L*D*D, ...) are
  // checked against the file size before they are formed, so no size can wrap around.
  const size_t avail = (f->size() - 28) / 4;  // floats in the file
  auto times = [&](size_t a, size_t b) -> size_t {
    if (a != 0 && b > avail / a) bad("truncated: " + std::to_string(f->size()) + " bytes cannot hold the weights the header implies");
    return a * b;
  };
  const size_t sizes[] = {V * D, L * D, times(L * D, D), times(L * kv, D), times(L * kv, D), times(L * D, D), L * D,
                          times(L * H, D), times(L * D, H), times(L * H, D), D, size_t(c.seq_len) * hs / 2,
                          size_t(c.seq_len) * hs / 2, c.shared_classifier ? 0 : V * D};
  size_t total = 0;
  for (size_t s : sizes) total += s;  // at most 14 terms each <= max(avail, 2^48): no overflow
  if (total > avail)
    bad("truncated: " + std::to_string(f->size()) + " bytes, header implies " + std::to_string(28 + total * 4));
  const uint8_t* p = f->data() + 28;
  std::vector<float>* dst[] = {&c.token_embedding, &c.rms_att, &c.wq, &c.wk, &c.wv, &c.wo, &c.rms_ffn,
                               &c.w1, &c.w2, &c.w3, &c.rms_final, nullptr, nullptr, &c.wcls};
  for (size_t i = 0; i < 14; ++i) {
    if (dst[i] && sizes[i] > 0) {
      dst[i]->resize(sizes[i]);
      std::memcpy(dst[i]->data(), p, sizes[i] * 4);
    }
    p += sizes[i] * 4;
  }
  return c;
}

}  // namespace ar
