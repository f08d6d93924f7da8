// transformers' fine-grained FP8 checkpoints (quant_method fp8, weight_block_size tiles of fp32
// multipliers named weight_scale_inv: DeepSeek-V3/R1, Kimi K2, Qwen3 FP8) as a model and as a
// quantization source. The reference is the exact formula, e4m3(code) x the tile's multiplier in fp32:
// a checkpoint made here from a synthetic DeepSeek-V3 model (tiles of 8, so edge tiles are partial)
// reads as its dequantized twin (every Linear in F32), gives the same logits to the last bit, and
// quantizes to the same packed Linears; Linears kept in 16 bit and the MTP layers are written
// dequantized in bf16, never as E4M3 codes without their scales; the configs it cannot read are refused.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/small_float.h"
#include "hf_checkpoint.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/quantize.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;

namespace {

constexpr int64_t kTile = 8;

bool fp8_linear(const std::string& name, const Shape& shape) {
  return name.rfind("model.layers.", 0) == 0 && name.ends_with(".weight") && shape.size() == 2 &&
         !name.ends_with(".mlp.gate.weight");  // the router stays 16 bit, as in DeepSeek's release
}

// `src` (a 16-bit checkpoint) as block FP8 in `fp8` and as its exact dequantization (Linears in F32) in
// `dense`. Multipliers are amax/448 per tile, or that rounded up to a power of two (`pow2`: then every
// dequantized value fits bf16, so a 16-bit copy loses nothing).
void make_fp8_twins(const std::string& src, const std::string& fp8, const std::string& dense, bool pow2) {
  namespace fs = std::filesystem;
  fs::create_directories(fp8);
  fs::create_directories(dense);
  json cfg = test::read_config(src);
  write_file_atomic(dense + "/config.json", cfg.dump());
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {kTile, kTile}}};
  write_file_atomic(fp8 + "/config.json", cfg.dump());
  Context ctx;
  auto f = SafetensorsFile::open(src + "/model.safetensors");
  std::vector<StEntry> a, b;
  for (const auto& t : f->header().tensors) {
    Tensor x = f->load_f32(t.name, ctx);
    if (!fp8_linear(t.name, t.shape)) {
      StEntry e{t.name, Tensor::empty(t.shape, t.dtype, ctx)};
      std::memcpy(e.tensor.raw(), f->bytes(t), e.tensor.nbytes());
      a.push_back(e);
      b.push_back(e);
      continue;
    }
    const int64_t R = t.shape[0], C = t.shape[1], tr = (R + kTile - 1) / kTile, tc = (C + kTile - 1) / kTile;
    Tensor codes = Tensor::empty({R, C}, DType::F8E4M3, ctx), scales = Tensor::empty({tr, tc}, DType::F32, ctx);
    Tensor deq = Tensor::empty({R, C}, DType::F32, ctx);
    for (int64_t i = 0; i < tr; ++i)
      for (int64_t j = 0; j < tc; ++j) {
        float amax = 0;
        for (int64_t r = i * kTile; r < std::min(R, (i + 1) * kTile); ++r)
          for (int64_t c = j * kTile; c < std::min(C, (j + 1) * kTile); ++c) amax = std::max(amax, std::fabs(x.f32()[r * C + c]));
        float s = amax > 0 ? amax / 448.f : 1.f;
        if (pow2) s = std::exp2(std::ceil(std::log2(s)));
        scales.f32()[i * tc + j] = s;
        for (int64_t r = i * kTile; r < std::min(R, (i + 1) * kTile); ++r)
          for (int64_t c = j * kTile; c < std::min(C, (j + 1) * kTile); ++c) {
            const uint8_t code = e4m3_encode(x.f32()[r * C + c] / s);
            static_cast<uint8_t*>(codes.raw())[r * C + c] = code;
            deq.f32()[r * C + c] = e4m3_decode(code) * s;
          }
      }
    a.push_back({t.name, codes});
    a.push_back({t.name.substr(0, t.name.size() - 7) + ".weight_scale_inv", scales});
    b.push_back({t.name, deq});
  }
  write_safetensors(fp8 + "/model.safetensors", a);
  write_safetensors(dense + "/model.safetensors", b);
  for (const char* file : {"tokenizer.bin", "tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(src + "/" + file)) {
      fs::copy_file(src + "/" + file, fp8 + "/" + file, fs::copy_options::overwrite_existing);
      fs::copy_file(src + "/" + file, dense + "/" + file, fs::copy_options::overwrite_existing);
    }
}

// A synthetic DeepSeek-V3 model (MLA with q_lora, a dense first layer, sigmoid-routed experts, a shared
// expert) with one MTP layer stored past num_hidden_layers (a copy of the last layer).
void write_deepseek_with_mtp(const std::string& dir) {
  json c = tiny_moe_config("deepseek_v3", 2);
  c["num_nextn_predict_layers"] = 1;
  write_synthetic_model(dir, c, 61, DType::BF16);
  test::append_layer_copy(dir, 1, 2);
}

TEST(Fp8Source, ReadsAsItsExactDequantization) {
  test::TempDir src("fp8_src"), fp8("fp8_fp8"), dense("fp8_dense");
  write_deepseek_with_mtp(src.path);
  make_fp8_twins(src.path, fp8.path, dense.path, /*pow2=*/false);
  auto m = HfModel::open(fp8.path), d = HfModel::open(dense.path);
  EXPECT_EQ(m->config().quant.fp, FloatQuant::Fp8);
  EXPECT_EQ(m->config().quant.block_rows, kTile);
  Context ctx;
  int linears = 0;
  for (int64_t l = 0; l < m->config().num_layers; ++l) {
    BlockWeights a = m->load_block(l, ctx), b = d->load_block(l, ctx);
    for (size_t k = 0; k < a.tensors.size(); ++k) {
      const Tensor& x = a.tensors[k].in(a);
      const Tensor& y = b.tensors[k].in(b);
      ASSERT_EQ(x.numel(), y.numel());
      EXPECT_EQ(std::memcmp(x.f32(), y.f32(), size_t(x.numel()) * 4), 0) << a.tensors[k].name;
      linears += a.tensors[k].role == TensorRole::Linear;
    }
  }
  EXPECT_GT(linears, 20);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back((i * 7 + 3) % int32_t(m->config().vocab_size));
  EXPECT_EQ(test::logits_of(fp8.path, ids, 2, 12), test::logits_of(dense.path, ids, 2, 12));
}

TEST(Fp8Source, QuantizesAsItsDequantizationAndWritesNoE4m3Codes) {
  test::TempDir src("fp8q_src"), fp8("fp8q_fp8"), dense("fp8q_dense"), qa("fp8q_qa"), qb("fp8q_qb");
  write_deepseek_with_mtp(src.path);
  make_fp8_twins(src.path, fp8.path, dense.path, /*pow2=*/true);
  for (const auto& [model, out] : {std::pair{fp8.path, qa.path}, {dense.path, qb.path}}) {
    auto o = test::moe_quantize_options(model, out, 2);
    o.fp_layers = {"layers.1.self_attn.o_proj"};  // one Linear kept in 16 bit
    quantize_model(o);
  }
  const auto a = test::tensor_bytes(qa.path + "/model.safetensors");
  const auto b = test::tensor_bytes(qb.path + "/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  auto qm = HfModel::open(qa.path), dm = HfModel::open(qb.path);
  Context ctx;
  int packed = 0, dequantized = 0;
  for (const auto& [name, bytes] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_EQ(name.find("weight_scale_inv"), std::string::npos) << name;
    const StTensorInfo* t = qm->info(name);
    EXPECT_NE(t->dtype, DType::F8E4M3) << name;
    if (bytes == b.at(name)) {
      packed += name.ends_with(".qweight");
      continue;
    }
    // Only the FP8 source's Linears copied in 16 bit differ: bf16 here, F32 from the dense twin, same values.
    EXPECT_EQ(t->dtype, DType::BF16) << name;
    EXPECT_EQ(dm->info(name)->dtype, DType::F32) << name;
    const Tensor x = qm->load(name, t->shape, ctx), y = dm->load(name, t->shape, ctx);
    EXPECT_EQ(std::memcmp(x.f32(), y.f32(), size_t(x.numel()) * 4), 0) << name;
    ++dequantized;
  }
  EXPECT_GT(packed, 20);
  EXPECT_GT(dequantized, 10) << "the 16-bit Linear and the MTP layer's Linears";
  EXPECT_TRUE(a.count("model.layers.2.self_attn.q_a_proj.weight")) << "the MTP layer is copied";
  EXPECT_EQ(read_json_file(qa.path + "/config.json")["quantization_config"]["quant_method"], "auto-round");
}

TEST(Fp8Source, RefusesWhatItCannotReadNamingTheFieldOrTensor) {
  test::TempDir src("fp8r_src"), fp8("fp8r_fp8"), dense("fp8r_dense"), out("fp8r_out");
  write_synthetic_model(src.path, tiny_moe_config("deepseek_v3", 2), 62, DType::BF16);
  make_fp8_twins(src.path, fp8.path, dense.path, false);
  const json good = test::read_config(fp8.path);
  const auto refused = [&](const json& cfg) {
    write_file_atomic(fp8.path + "/config.json", cfg.dump());
    return test::error_of([&] { HfModel::open(fp8.path); });
  };
  json c = good;
  c["quantization_config"]["fmt"] = "e5m2";
  EXPECT_NE(refused(c).find("quantization_config.fmt': 'e5m2' is not supported (e4m3)"), std::string::npos) << refused(c);
  c = good;
  c["quantization_config"]["activation_scheme"] = "static";
  EXPECT_NE(refused(c).find("quantization_config.activation_scheme': 'static' is not supported"), std::string::npos) << refused(c);
  c = good;
  c["quantization_config"]["weight_block_size"] = {16, 16};  // the stored scales are for tiles of 8
  const std::string e = refused(c);
  EXPECT_NE(e.find("weight_scale_inv' has shape"), std::string::npos) << e;
  write_file_atomic(fp8.path + "/config.json", good.dump());
  EXPECT_NO_THROW(HfModel::open(fp8.path));
  // A packed integer checkpoint is not a source: quantizing it again is refused.
  auto o = test::moe_quantize_options(dense.path, out.path, 0);
  quantize_model(o);
  const std::string again = test::error_of([&] { quantize_model(test::moe_quantize_options(out.path, fp8.path + "_x", 0)); });
  EXPECT_NE(again.find("the model is already quantized"), std::string::npos) << again;
}

}  // namespace
