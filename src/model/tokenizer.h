// Tokenizer of a model directory. This version reads the llama2.c format (tokenizer.bin, written by
// `autoround convert`); Hugging Face tokenizer.json / tokenizer.model support is a separate issue.
#pragma once
#include <string>

#include "model/tokenizer_llama2c.h"

namespace ar {
Llama2cTokenizer load_tokenizer(const std::string& model_dir);
}
