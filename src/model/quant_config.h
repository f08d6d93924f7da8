// config.json's quantization_config -> QuantConfig (model/config.h):
//   quant_method auto-round  packing auto_round | auto_round:auto_gptq | auto_round:gptqmodel |
//                            auto_round:auto_awq | auto_round:fake | auto_round:llm_compressor (the
//                            float schemes, data_type mx_fp / nv_fp / fp, stored as compressed-tensors does)
//   quant_method gptq, awq   (auto_gptq / auto_awq packing)
//   quant_method compressed-tensors  format mxfp4-pack-quantized | nvfp4-pack-quantized | mxfp8-quantized |
//                            float-quantized; every config group must carry the same float weight scheme
//   quant_method fp8         transformers' fine-grained FP8: E4M3 weights, weight_block_size tiles of
//                            fp32 multipliers named weight_scale_inv, dynamic activations
// Anything else is refused naming the field. `path` names the file in errors.
#pragma once
#include <string>

#include "io/json_file.h"
#include "model/config.h"

namespace ar {

QuantConfig parse_quant_config(const JsonIn& qi, const std::string& path);

}  // namespace ar
