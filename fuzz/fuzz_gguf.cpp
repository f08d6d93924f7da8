// Fuzz target: GGUF metadata (GgufFile::open) and the llama.cpp vocabulary read from it
// (HfBpeTokenizer::from_gguf), then the tokenizer it yields.
#include "fuzz_util.h"
#include "io/gguf.h"
#include "model/tokenizer/hf_bpe.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string path = ar::fuzz::write_input("model.gguf", data, size);
    ar::GgufFile g = ar::GgufFile::open(path);
    (void)g.string("general.architecture", "");
    (void)g.number("general.alignment", 32);
    auto t = ar::HfBpeTokenizer::from_gguf(path);
    ar::fuzz::exercise_tokenizer(*t, data, size);
  });
}
