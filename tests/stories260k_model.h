// The stories260K fixture (../shared/fixtures/stories260K) converted to a model directory, for tests
// that quantize or read a real model. Header-only: the tests that use it link ar_model already.
#pragma once
#include <string>

#include "model/convert_llama2c.h"

namespace ar::test {

// Converts the llama2.c checkpoint and tokenizer under fixtures dir `fx` into `out_dir`.
inline void convert_stories260k(const std::string& fx, const std::string& out_dir) {
  ConvertOptions o;
  o.checkpoint = fx + "/stories260K/stories260K.bin";
  o.tokenizer = fx + "/stories260K/tok512.bin";
  o.out_dir = out_dir;
  convert_llama2c(o);
}

}  // namespace ar::test
