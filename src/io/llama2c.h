// llama2.c "legacy version 0" checkpoint: 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; vocab_size < 0 means a separate classifier), then fp32 arrays:
// token_embedding[V,dim], rms_att[L,dim], wq[L,dim,dim], wk[L,kv,dim], wv[L,kv,dim], wo[L,dim,dim],
// rms_ffn[L,dim], w1[L,hid,dim], w2[L,dim,hid], w3[L,hid,dim], rms_final[dim],
// freq_cis_real/imag[seq_len, head/2] (skipped), wcls[V,dim] if not shared.
// Rotary in llama2.c pairs adjacent dims (2i, 2i+1) — see cli convert for the HF permutation.
#pragma once
#include <string>
#include <vector>

namespace ar {

struct Llama2cCheckpoint {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  std::vector<float> token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls;
};

Llama2cCheckpoint read_llama2c(const std::string& path);

}  // namespace ar
