#include "model/dequant_float.h"

#include <cmath>
#include <initializer_list>
#include <vector>

#include "core/error.h"
#include "core/small_float.h"
#include "model/linear_specs.h"

namespace ar {
namespace {

const char* scheme_name(FloatQuant f) {
  switch (f) {
    case FloatQuant::Mxfp4: return "MXFP4";
    case FloatQuant::Mxfp8: return "MXFP8";
    case FloatQuant::Nvfp4: return "NVFP4";
    case FloatQuant::Fp8: return "FP8";
    case FloatQuant::None: break;
  }
  return "dense";
}

std::string dtypes_str(std::initializer_list<DType> ds) {
  std::string s;
  for (DType d : ds) s += (s.empty() ? "" : " or ") + std::string(dtype_safetensors_name(d));
  return s;
}

// The header entry of one part of a float-scheme Linear, with its dtype and shape checked.
const StTensorInfo& expect_part(const HfModel& m, const std::string& name, std::initializer_list<DType> dtypes,
                                std::initializer_list<Shape> shapes) {
  std::string file;
  const StTensorInfo* t = m.info(name, &file);
  if (!t) fail(ErrorKind::InvalidInput, m.dir() + ": tensor '" + name + "' is missing");
  bool dtype_ok = false, shape_ok = false;
  for (DType d : dtypes) dtype_ok |= t->dtype == d;
  for (const Shape& s : shapes) shape_ok |= t->shape == s;

  if (!dtype_ok)
    fail(ErrorKind::InvalidInput, file + ": tensor '" + name + "' has dtype " + dtype_safetensors_name(t->dtype) +
                                      "; " + scheme_name(m.config().quant.fp) + " stores it as " + dtypes_str(dtypes));
  if (!shape_ok) {
    std::string want;
    for (const Shape& s : shapes) want += (want.empty() ? "" : " or ") + shape_str(s);
    fail(ErrorKind::InvalidInput, file + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " + want);
  }
  return *t;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scale grid of an FP8 Linear: one scale per br x bc tile.
struct Tiles {
  int64_t br, bc;
};

Tiles fp8_tiles(const HfModel& m, const std::string& prefix, int64_t out, int64_t in) {
  const QuantConfig& q = m.config().quant;
  const std::string name = prefix + "." + q.fp8_scale;
  const std::initializer_list<DType> fl = {DType::F32, DType::BF16, DType::F16};
  if (q.block_rows > 0) {
    expect_part(m, name, fl, {{cdiv(out, q.block_rows), cdiv(in, q.block_cols)}});
    return {q.block_rows, q.block_cols};
  }
  const StTensorInfo& t = expect_part(m, name, fl, {{out}, {out, 1}, {1}, {}, {1, 1}});
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n == out ? Tiles{1, in} : Tiles{out, in};
}

// fp32 values of a stored float tensor (F32/BF16/F16/F8_E4M3) or of U8 E8M0 codes.
std::vector<float> values(const HfModel& m, const std::string& name, bool e8m0) {
  const uint8_t* bytes = nullptr;
  const StTensorInfo& t = m.raw_info(name, &bytes);
  size_t n = 1;
  for (int64_t d : t.shape) n *= size_t(d);
  std::vector<float> v(n);
  if (e8m0)
    for (size_t i = 0; i < n; ++i) v[i] = e8m0_decode(bytes[i]);
  else
    convert_to_f32(bytes, t.dtype, v.data(), n);
  return v;
}

void check_finite(const HfModel& m, const std::string& prefix, const Tensor& w) {
  const float* p = w.f32();
  for (int64_t i = 0; i < w.numel(); ++i)
    if (!std::isfinite(p[i]))
      fail(ErrorKind::InvalidInput, m.dir() + ": " + scheme_name(m.config().quant.fp) + " Linear '" + prefix +
                                        "' dequantizes to a non-finite value at element " + std::to_string(i) +
                                        " (a NaN code, an E8M0 scale of 255 or a zero global scale)");
}

}  // namespace

bool check_float_linear(const HfModel& m, const std::string& prefix, const Shape& expect) {
  const QuantConfig& q = m.config().quant;
  const int64_t out = expect[0], in = expect[1];
  const std::string w = prefix + ".weight";
  switch (q.fp) {
    case FloatQuant::None: return false;
    case FloatQuant::Mxfp4:
    case FloatQuant::Nvfp4: {
      if (!m.has(prefix + ".weight_packed")) return false;
      const int64_t g = q.fp == FloatQuant::Mxfp4 ? 32 : 16;
      if (in % g)
        fail(ErrorKind::InvalidInput, m.dir() + ": " + scheme_name(q.fp) + " Linear '" + prefix + "' has " +
                                          std::to_string(in) + " inputs, not a multiple of its group size " +
                                          std::to_string(g));
      expect_part(m, prefix + ".weight_packed", {DType::U8}, {{out, in / 2}});
      if (q.fp == FloatQuant::Mxfp4) {
        expect_part(m, prefix + ".weight_scale", {DType::U8}, {{out, in / g}});
      } else {
        expect_part(m, prefix + ".weight_scale", {DType::F8E4M3}, {{out, in / g}});
        expect_part(m, prefix + ".weight_global_scale", {DType::F32}, {{1}, {}});
      }
      return true;
    }
    case FloatQuant::Mxfp8:
    case FloatQuant::Fp8: {
      const StTensorInfo* t = m.info(w);
      if (!t || t->dtype != DType::F8E4M3) return false;
      expect_part(m, w, {DType::F8E4M3}, {expect});
      if (q.fp == FloatQuant::Mxfp8) {
        if (in % 32)
          fail(ErrorKind::InvalidInput, m.dir() + ": MXFP8 Linear '" + prefix + "' has " + std::to_string(in) +
                                            " inputs, not a multiple of its group size 32");
        expect_part(m, prefix + ".weight_scale", {DType::U8}, {{out, in / 32}});
      } else {
        fp8_tiles(m, prefix, out, in);
      }
      return true;
    }
  }
  return false;
}

Tensor dequantize_float_linear(const HfModel& m, const std::string& prefix, const Shape& expect, Context& ctx) {
  const QuantConfig& q = m.config().quant;
  const int64_t out = expect[0], in = expect[1];
  Tensor w = Tensor::empty({out, in}, DType::F32, ctx);
  float* dst = w.f32();
  if (q.fp == FloatQuant::Mxfp4 || q.fp == FloatQuant::Nvfp4) {
    const uint8_t* packed = nullptr;
    m.raw_info(prefix + ".weight_packed", &packed);
    const bool mx = q.fp == FloatQuant::Mxfp4;
    const int64_t g = mx ? 32 : 16;
    const std::vector<float> s = values(m, prefix + ".weight_scale", mx);
    const float G = mx ? 1.0f : values(m, prefix + ".weight_global_scale", false)[0];
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const uint8_t byte = packed[r * (in / 2) + c / 2];
        const float v = e2m1_decode(c % 2 ? uint8_t(byte >> 4) : byte);
        const float sc = s[size_t(r * (in / g) + c / g)];
        dst[r * in + c] = mx ? v * sc : bf16_to_f32(f32_to_bf16(v * (sc / G)));
      }
  } else {
    const std::vector<float> v = values(m, prefix + ".weight", false);
    const bool mx = q.fp == FloatQuant::Mxfp8;
    const Tiles t = mx ? Tiles{1, 32} : fp8_tiles(m, prefix, out, in);
    const std::vector<float> s = values(m, prefix + "." + (mx ? std::string("weight_scale") : q.fp8_scale), mx);
    const int64_t across = cdiv(in, t.bc);
    // MXFP8 as compressed-tensors computes it, in bf16 (exact but below bf16's normal range); FP8 one
    // fp32 product, as its forward in an fp32 model computes it (the scale widened exactly to fp32).
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const float p = v[size_t(r * in + c)] * s[size_t((r / t.br) * across + c / t.bc)];
        dst[r * in + c] = mx ? bf16_to_f32(f32_to_bf16(p)) : p;
      }
  }
  check_finite(m, prefix, w);
  return w;
}

Fp8Part fp8_part(const HfModel& m, const std::string& name) {
  const QuantConfig& q = m.config().quant;
  if (!q.present || q.fp != FloatQuant::Fp8) return Fp8Part::None;
  const auto e4m3_weight = [&](const std::string& weight) {
    const StTensorInfo* t = m.info(weight);
    return t && t->dtype == DType::F8E4M3;
  };
  if (name.ends_with(".weight")) return e4m3_weight(name) ? Fp8Part::Weight : Fp8Part::None;
  const std::string scale = "." + q.fp8_scale;
  if (name.ends_with(scale) && e4m3_weight(name.substr(0, name.size() - scale.size()) + ".weight"))
    return Fp8Part::Scale;
  return Fp8Part::None;
}

float static_input_scale(const HfModel& m, const std::string& prefix, const Shape& expect) {
  if (!m.config().quant.act_static || !check_float_linear(m, prefix, expect)) return 0.f;
  const std::string name = prefix + ".input_scale";
  std::string file;
  if (!m.info(name, &file))
    fail(ErrorKind::InvalidInput, m.dir() + ": tensor '" + name + "' is missing (the config has static FP8 "
                                            "activations: every quantized Linear needs its input scale)");
  expect_part(m, name, {DType::F32, DType::BF16, DType::F16}, {{1}, {}});
  const float s = values(m, name, false)[0];
  if (!std::isfinite(s) || s <= 0.f)
    fail(ErrorKind::InvalidInput, file + ": tensor '" + name + "' is " + std::to_string(s) +
                                      "; an activation scale must be finite and positive");
  return s;
}

ActQdq<float> block_input_scales(const HfModel& m, int64_t layer) {
  ActQdq<float> a;
  if (!m.config().quant.act_static) return a;
  for (const LinearSpec& l : block_linear_specs(m.config(), layer))  // linear_slot order, experts included
    a.s.push_back(static_input_scale(m, HfModel::layer_prefix(layer) + l.name, {l.out, l.in}));
  return a;
}

}  // namespace ar
