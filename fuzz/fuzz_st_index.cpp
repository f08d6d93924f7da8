// Fuzz target: a sharded model's model.safetensors.index.json (HfModel::open). The directory also
// holds a fixed valid config.json and two small shards, so the index's weight_map is checked
// against real shard files; the fuzzer mutates only the index.
#include <filesystem>

#include "core/context.h"
#include "fuzz_util.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace {
const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 4,
 "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "tie_word_embeddings": false})";

// Once per process: <scratch>/model with config.json and shards model-0000{1,2}-of-00002.safetensors.
const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = ar::fuzz::scratch_dir() + "/model";
    std::filesystem::create_directories(d);
    ar::fuzz::write_file(d + "/config.json", reinterpret_cast<const uint8_t*>(kConfig), std::strlen(kConfig));
    ar::Context ctx({}, 1);
    auto t = [&](ar::Shape s) { return ar::Tensor::zeros(s, ar::DType::F32, ctx); };
    ar::write_safetensors(d + "/model-00001-of-00002.safetensors",
                          {{"model.embed_tokens.weight", t({4, 8})}, {"model.norm.weight", t({8})}});
    ar::write_safetensors(d + "/model-00002-of-00002.safetensors", {{"lm_head.weight", t({4, 8})}});
    return d;
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = model_dir();
  return ar::fuzz::guarded([&] {
    ar::fuzz::write_file(dir + "/model.safetensors.index.json", data, size);
    auto m = ar::HfModel::open(dir);
    (void)m->has("lm_head.weight");
  });
}
