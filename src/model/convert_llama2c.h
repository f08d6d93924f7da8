// llama2.c checkpoint + tokenizer -> HF-style Llama directory (config.json, model.safetensors,
// tokenizer files). llama2.c rotates adjacent pairs (2i, 2i+1) of each head; HF rotates (i, i+D/2)
// with the same frequency index i. Rows of wq/wk are permuted per head so that HF row i takes
// llama2.c row 2i and HF row i+D/2 takes row 2i+1; q.k is unchanged, so logits are identical.
#pragma once
#include <string>

#include "core/dtype.h"

namespace ar {

struct ConvertOptions {
  std::string checkpoint, tokenizer, out_dir;
  DType dtype = DType::F32;  // tensor dtype written to model.safetensors
  bool overwrite = false;
};

void convert_llama2c(const ConvertOptions& opt);

}  // namespace ar
