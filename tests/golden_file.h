// Reading the goldens that tools/ write as safetensors (fp32 tensors of a known element count).
#pragma once
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/safetensors.h"

namespace ar::test {

// The fp32 values of golden tensor `name`, which must hold `expect` elements (a failure otherwise, and
// zeros).
inline std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name, size_t expect) {
  const StTensorInfo* t = f.find(name);
  if (!t) ADD_FAILURE() << "golden tensor " << name << " missing";
  if (!t) return std::vector<float>(expect);
  EXPECT_EQ(t->dtype, DType::F32) << name;
  EXPECT_EQ(t->end - t->begin, expect * 4) << name;
  std::vector<float> v(expect);
  std::memcpy(v.data(), f.bytes(*t), std::min(expect * 4, t->end - t->begin));
  return v;
}

}  // namespace ar::test
