// Fuzz target: a model's config.json (load_model_config: JSON, architecture registry, every field
// validated), then the block dimensions derived from it.
#include "fuzz_util.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string path = ar::fuzz::write_input("config.json", data, size);
    ar::ModelConfig c = ar::load_model_config(path);
    for (int64_t l = 0; l < c.num_layers; ++l) (void)c.block_dims(l);
  });
}
