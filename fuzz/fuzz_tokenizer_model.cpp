// Fuzz target: tokenizer.model as load_tokenizer() reads it from a model directory: a SentencePiece
// protobuf (HfBpeTokenizer::from_sentencepiece) or, when its first line looks like "base64 rank",
// a tiktoken rank file (from_tiktoken); then the tokenizer it yields.
#include "fuzz_util.h"
#include "model/tokenizer/tokenizer.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    ar::fuzz::write_input("tokenizer.model", data, size);
    auto t = ar::load_tokenizer(ar::fuzz::scratch_dir());
    ar::fuzz::exercise_tokenizer(*t, data, size);
  });
}
