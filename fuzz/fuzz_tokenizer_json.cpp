// Fuzz target: tokenizer.json (HfBpeTokenizer::from_tokenizer_json), then the tokenizer it yields.
#include "fuzz_util.h"
#include "model/tokenizer/hf_bpe.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string path = ar::fuzz::write_input("tokenizer.json", data, size);
    auto t = ar::HfBpeTokenizer::from_tokenizer_json(path, nlohmann::json::object());
    ar::fuzz::exercise_tokenizer(*t, data, size);
  });
}
