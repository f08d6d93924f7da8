// Fuzz target: llama2.c tokenizer.bin (Llama2cTokenizer::load), then the tokenizer it yields.
#include "fuzz_util.h"
#include "model/tokenizer_llama2c.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string path = ar::fuzz::write_input("tokenizer.bin", data, size);
    ar::Llama2cTokenizer t = ar::Llama2cTokenizer::load(path);
    ar::fuzz::exercise_tokenizer(t, data, size);
    (void)t.decode_all(t.encode("Once upon a time", true, true));
  });
}
