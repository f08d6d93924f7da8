// gpt-oss checkpoints rewritten from a synthetic per-expert model (model/synthetic.h's "gpt_oss"), for the
// pipeline tests: transformers 5's fused layout, and the release's MXFP4 experts with their exact bf16 twin.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/small_float.h"
#include "hf_checkpoint.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/loader.h"

namespace ar::test {

// The model rewritten in gpt-oss's released layout (transformers 5's fused experts): per layer
// gate_up_proj [E, C, 2I] with gate and up interleaved by column, down_proj [E, I, C], each expert's Linear
// transposed, and the biases gate_up_proj_bias [E, 2I] (interleaved), down_proj_bias [E, C].
inline void write_gpt_oss_fused_twin(const std::string& src, const std::string& dst) {
  std::filesystem::create_directories(dst);
  for (const char* f : {"config.json", "tokenizer.bin"}) std::filesystem::copy_file(src + "/" + f, dst + "/" + f);
  const ModelConfig c = load_model_config(src + "/config.json");
  auto in = SafetensorsFile::open(src + "/model.safetensors");
  Context ctx(Device{}, 1);
  std::vector<StEntry> out;
  std::set<std::string> moved;
  const int64_t E = c.moe.num_experts, I = c.moe.expert_intermediate, C = c.hidden_size;
  const auto at = [&](const std::string& n) {
    moved.insert(n);
    return reinterpret_cast<const uint16_t*>(in->bytes(*in->find(n)));
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = HfModel::layer_prefix(l) + "mlp.experts.";
    Tensor gu = Tensor::empty({E, C, 2 * I}, DType::BF16, ctx), gub = Tensor::empty({E, 2 * I}, DType::BF16, ctx);
    Tensor dn = Tensor::empty({E, I, C}, DType::BF16, ctx), dnb = Tensor::empty({E, C}, DType::BF16, ctx);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      for (int j = 0; j < 2; ++j) {  // gate (even columns), up (odd columns)
        const std::string proj = x + (j == 0 ? "gate_proj." : "up_proj.");
        const uint16_t *w = at(proj + "weight"), *b = at(proj + "bias");
        for (int64_t i = 0; i < I; ++i) {
          gub.data<uint16_t>()[e * 2 * I + 2 * i + j] = b[i];
          for (int64_t k = 0; k < C; ++k) gu.data<uint16_t>()[(e * C + k) * 2 * I + 2 * i + j] = w[i * C + k];
        }
      }
      const uint16_t *w = at(x + "down_proj.weight"), *b = at(x + "down_proj.bias");
      for (int64_t k = 0; k < C; ++k) {
        dnb.data<uint16_t>()[e * C + k] = b[k];
        for (int64_t i = 0; i < I; ++i) dn.data<uint16_t>()[(e * I + i) * C + k] = w[k * I + i];
      }
    }
    out.push_back({p + "gate_up_proj", gu});
    out.push_back({p + "gate_up_proj_bias", gub});
    out.push_back({p + "down_proj", dn});
    out.push_back({p + "down_proj_bias", dnb});
  }
  append_stored_except(*in, moved, out, ctx);
  write_safetensors(dst + "/model.safetensors", out);
}

// gpt-oss's release layout: the per-expert model's experts rounded to MXFP4 (per 32 inputs a power-of-two
// scale and E2M1 codes) and stored as gate_up_proj_blocks / _scales, down_proj_blocks / _scales with
// quant_method mxfp4 (to `mx`), and the same rounded values in bf16 one tensor per expert (to `twin`).
inline void write_gpt_oss_mxfp4_twins(const std::string& src, const std::string& mx, const std::string& twin) {
  for (const auto& d : {mx, twin}) {
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(src + "/tokenizer.bin", d + "/tokenizer.bin");
  }
  nlohmann::json cfg = read_json_file(src + "/config.json");
  write_file_atomic(twin + "/config.json", cfg.dump());
  cfg["quantization_config"] = {{"quant_method", "mxfp4"}};
  write_file_atomic(mx + "/config.json", cfg.dump());
  const ModelConfig c = load_model_config(src + "/config.json");
  auto in = SafetensorsFile::open(src + "/model.safetensors");
  const auto model = HfModel::open(src);
  Context ctx(Device{}, 1);
  std::vector<StEntry> packed, dense;
  std::set<std::string> moved;
  const int64_t E = c.moe.num_experts, I = c.moe.expert_intermediate, C = c.hidden_size;
  // Row r of a Linear [rows, cols] in MXFP4 into blocks/scales at row `at`; the rounded row into `back`.
  const auto round_row = [](const float* x, int64_t cols, uint8_t* blocks, uint8_t* scales, uint16_t* back) {
    for (int64_t g = 0; g < cols / 32; ++g) {
      float amax = 0;
      for (int64_t k = 0; k < 32; ++k) amax = std::max(amax, std::abs(x[g * 32 + k]));
      const int e = amax > 0 ? int(std::ceil(std::log2(amax / 6.0f))) : -127;
      scales[g] = uint8_t(std::clamp(e, -127, 127) + 127);
      for (int64_t k = 0; k < 32; ++k) {
        const uint8_t code = e2m1_encode(std::ldexp(x[g * 32 + k], -(int(scales[g]) - 127)));
        blocks[g * 16 + k / 2] |= uint8_t(k % 2 ? code << 4 : code);
        back[g * 32 + k] = f32_to_bf16(std::ldexp(e2m1_decode(code), int(scales[g]) - 127));
      }
    }
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = HfModel::layer_prefix(l) + "mlp.experts.";
    Tensor gb = Tensor::zeros({E, 2 * I, C / 32, 16}, DType::U8, ctx), gs = Tensor::empty({E, 2 * I, C / 32}, DType::U8, ctx);
    Tensor db = Tensor::zeros({E, C, I / 32, 16}, DType::U8, ctx), ds = Tensor::empty({E, C, I / 32}, DType::U8, ctx);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      for (int j = 0; j < 3; ++j) {
        const std::string name = x + (j == 0 ? "gate_proj" : j == 1 ? "up_proj" : "down_proj") + ".weight";
        moved.insert(name);
        const Tensor w = model->load(name, {}, ctx);
        const int64_t rows = w.dim(0), cols = w.dim(1);
        Tensor back = Tensor::empty({rows, cols}, DType::BF16, ctx);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t at = j == 2 ? e * C + r : e * 2 * I + 2 * r + j;  // gate and up rows interleaved
          uint8_t* blocks = (j == 2 ? db : gb).data<uint8_t>() + at * (cols / 32) * 16;
          uint8_t* scales = (j == 2 ? ds : gs).data<uint8_t>() + at * (cols / 32);
          round_row(w.f32() + r * cols, cols, blocks, scales, back.data<uint16_t>() + r * cols);
        }
        dense.push_back({name, back});
      }
    }
    packed.push_back({p + "gate_up_proj_blocks", gb});
    packed.push_back({p + "gate_up_proj_scales", gs});
    packed.push_back({p + "down_proj_blocks", db});
    packed.push_back({p + "down_proj_scales", ds});
  }
  for (const auto& t : in->header().tensors)  // biases: per expert in the twin, fused in the release
    if (!moved.count(t.name)) {
      Tensor copy = Tensor::empty(t.shape, t.dtype, ctx);
      std::memcpy(copy.raw(), in->bytes(t), t.end - t.begin);
      dense.push_back({t.name, copy});
      if (t.name.find(".mlp.experts.") == std::string::npos) packed.push_back({t.name, copy});
    }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = HfModel::layer_prefix(l) + "mlp.experts.";
    Tensor gub = Tensor::empty({E, 2 * I}, DType::BF16, ctx), dnb = Tensor::empty({E, C}, DType::BF16, ctx);
    for (int64_t e = 0; e < E; ++e) {
      const auto bias = [&](const char* proj) {
        return reinterpret_cast<const uint16_t*>(in->bytes(*in->find(p + std::to_string(e) + "." + proj + ".bias")));
      };
      for (int64_t i = 0; i < I; ++i) {
        gub.data<uint16_t>()[e * 2 * I + 2 * i] = bias("gate_proj")[i];
        gub.data<uint16_t>()[e * 2 * I + 2 * i + 1] = bias("up_proj")[i];
      }
      std::memcpy(dnb.data<uint16_t>() + e * C, bias("down_proj"), size_t(C) * 2);
    }
    packed.push_back({p + "gate_up_proj_bias", gub});
    packed.push_back({p + "down_proj_bias", dnb});
  }
  write_safetensors(mx + "/model.safetensors", packed);
  write_safetensors(twin + "/model.safetensors", dense);
}

}  // namespace ar::test
