// The quantize options the pipeline tests start from: a small calibration (8 samples of 64 tokens),
// W4G32 symmetric, 2 threads; each test changes what it exercises.
#pragma once
#include <string>

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

}  // namespace ar::test
