// Fuzz target: a GGUF file read as a model (open_gguf_model: the configuration from the architecture's
// keys, every tensor info checked against it and against the data section), then every tensor the
// computation reads dequantized to fp32 (Q/K rows un-permuted, values checked finite) and the
// vocabulary loaded against the model's vocab_size. Seeds: fuzz/corpus/gguf_tensors (one-layer llama
// q4_0, qwen2 q8_0, qwen3 f16 tied, written by `--format gguf:<preset>`).
#include "core/context.h"
#include "fuzz_util.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string path = ar::fuzz::write_input("model.gguf", data, size);
    auto m = ar::open_gguf_model(path);
    ar::Context ctx({}, 1);
    (void)m->load_embeddings(ctx);
    for (int64_t l = 0; l < m->config().num_layers; ++l) (void)m->load_block(l, ctx);
    (void)m->load_final_norm(ctx);
    (void)m->load_lm_head(ctx);
    auto tok = ar::load_tokenizer(*m);
    (void)tok->decode(tok->encode("Once upon a time"));
  });
}
