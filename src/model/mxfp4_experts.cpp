// gpt-oss's released experts in MXFP4 (quantization_config {"quant_method": "mxfp4"}): per layer
// mlp.experts.gate_up_proj_blocks [E, 2I, C/32, 16] + gate_up_proj_scales [E, 2I, C/32] and
// down_proj_blocks [E, C, I/32, 16] + down_proj_scales [E, C, I/32], each U8: row r of expert e is an
// output of the Linear (gate_up: gate and up interleaved), its inputs in groups of 32 codes E2M1 (low
// nibble first) times 2^(scale - 127). transformers dequantizes them with exactly this formula
// (integrations/mxfp4.py, convert_moe_packed_tensors) into the bf16 layout [E, in, out], which every value
// fits exactly; an expert is read here into that layout in fp32 and gathered like a bf16 checkpoint's
// (HfModel::stored_columns). A scale of 0xFF (E8M0's NaN) is refused naming the tensor.
#include <cmath>

#include "core/error.h"
#include "core/small_float.h"
#include "model/loader.h"

namespace ar {

namespace {
// The [E, out, in] shape the blocks and scales of a bf16-layout [E, in, out] fused tensor must describe.
Shape blocks_shape(const Shape& bf16) { return {bf16[0], bf16[2], bf16[1] / 32, 16}; }
Shape scales_shape(const Shape& bf16) { return {bf16[0], bf16[2], bf16[1] / 32}; }
}  // namespace

void HfModel::check_mxfp4_experts(const std::string& name, const Shape& bf16) const {
  if (bf16[1] % 32)
    fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + name + "_blocks': MXFP4 experts need an input width that is a "
                                  "multiple of 32, config.json implies " + std::to_string(bf16[1]));
  for (const auto& [part, shape] : {std::pair{"_blocks", blocks_shape(bf16)}, {"_scales", scales_shape(bf16)}}) {
    std::string file;
    const StTensorInfo* t = info(name + part, &file);
    if (!t) fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + name + part + "' is missing (quant_method mxfp4)");
    if (t->dtype != DType::U8 || t->shape != shape)
      fail(ErrorKind::InvalidInput, file + ": tensor '" + name + part + "' is " + dtype_safetensors_name(t->dtype) + " " +
                                        shape_str(t->shape) + "; MXFP4 experts need U8 " + shape_str(shape));
  }
}

Tensor HfModel::load_mxfp4_expert(const std::string& name, const Shape& bf16, int64_t expert, Context& ctx) const {
  const int64_t in = bf16[1], out = bf16[2], G = in / 32;
  const uint8_t *blocks = nullptr, *scales = nullptr;
  raw_info(name + "_blocks", &blocks);
  raw_info(name + "_scales", &scales);
  blocks += expert * out * G * 16;
  scales += expert * out * G;
  Tensor t = Tensor::empty({in, out}, DType::F32, ctx);
  float* dst = t.f32();
  for (int64_t r = 0; r < out; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t s = scales[r * G + g];
      if (s == 0xFF)
        fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + name + "_scales' holds 0xFF (E8M0's NaN) at expert " +
                                          std::to_string(expert) + ", row " + std::to_string(r) + ", group " +
                                          std::to_string(g));
      const uint8_t* b = blocks + (r * G + g) * 16;
      for (int64_t k = 0; k < 32; ++k) {
        const uint8_t code = k % 2 ? uint8_t(b[k / 2] >> 4) : uint8_t(b[k / 2] & 0x0F);
        dst[(g * 32 + k) * out + r] = std::ldexp(e2m1_decode(code), int(s) - 127);
      }
    }
  return t;
}

}  // namespace ar
