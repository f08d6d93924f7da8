// The quantize options the pipeline tests start from: a small calibration (8 samples of 64 tokens),
// W4G32 symmetric, 2 threads; each test changes what it exercises.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "pipeline/quantize.h"

namespace ar::test {

inline QuantizeOptions small_quantize_options(const std::string& model, const std::string& out, int iters) {
  QuantizeOptions o;
  o.model_dir = model;
  o.output_dir = out;
  o.fmt = {4, 32, true};
  o.tune.iters = iters;
  o.calib.nsamples = 8;
  o.calib.seqlen = 64;
  o.threads = 2;
  return o;
}

// A MoE pipeline test's options: the small ones, 32-token samples, overwriting the output.
inline QuantizeOptions moe_quantize_options(const std::string& model, const std::string& out, int iters) {
  QuantizeOptions o = small_quantize_options(model, out, iters);
  o.calib.seqlen = 32;
  o.overwrite = true;
  return o;
}

// Every tensor of a safetensors file: name -> (dtype, shape, bytes), for byte-for-byte comparisons.
inline std::map<std::string, std::string> tensor_bytes(const std::string& file) {
  auto f = SafetensorsFile::open(file);
  std::map<std::string, std::string> r;
  for (const auto& t : f->header().tensors)
    r[t.name] = std::to_string(int(t.dtype)) + shape_str(t.shape) +
                std::string(reinterpret_cast<const char*>(f->bytes(t)), t.end - t.begin);
  return r;
}

}  // namespace ar::test
