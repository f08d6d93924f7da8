#include "model/tokenizer.h"

#include "core/error.h"
#include "io/mapped_file.h"

namespace ar {
Llama2cTokenizer load_tokenizer(const std::string& model_dir) {
  const std::string p = model_dir + "/tokenizer.bin";
  if (!file_exists(p))
    fail(ErrorKind::Unsupported, model_dir + ": no tokenizer.bin (llama2.c format); Hugging Face tokenizer.json "
                                             "is not supported yet");
  return Llama2cTokenizer::load(p);
}
}  // namespace ar
