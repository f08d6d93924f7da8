// Writes a random-weight HF model directory for a given config.json (tests, benchmarks, demos).
// Weights ~ N(0, 1/sqrt(fan_in)) (norm weights ~ 1 + N(0, 0.1)), seeded, in the requested dtype;
// optionally sharded into `shards` files with a model.safetensors.index.json.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.h"

namespace ar {

void write_synthetic_model(const std::string& dir, const nlohmann::json& config, uint64_t seed,
                           DType dtype = DType::F32, int shards = 1);

// Writes a llama2.c-format tokenizer.bin: <unk>, BOS, EOS, the 256 byte tokens, then common
// English pairs with descending scores up to vocab_size (at least 259).
void write_byte_tokenizer(const std::string& path, int64_t vocab_size);

// A small Llama-style config (hidden 64, 2 layers, GQA) for tests and demos.
nlohmann::json tiny_llama_config(int64_t layers = 2);

}  // namespace ar
