// The 2026 families on the quantization pipeline (DeepSeek-V3's latent attention and sigmoid router,
// GLM-4.5's partial RoPE and biases, gpt-oss's sinks, windows and biased experts), on synthetic checkpoints: plain RTN reads back as the exact QDQ of
// every Linear (MLA's five, the experts, the shared experts) with every other tensor copied bit for bit and
// the router listed as 16 bit; SignRound lowers each block's loss and beats RTN on the model's KL; the
// data-parallel worlds 2 and 4 write the serial bytes; the MTP layers stored past num_hidden_layers are
// copied unchanged.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "hf_checkpoint.h"
#include "core/dtype.h"
#include "core/small_float.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/transformer.h"
#include "pipeline/quantize.h"
#include "quant/qdq.h"
#include "quant/signround.h"
#include "fp_schemes.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* const kFamilies[] = {"deepseek_v3", "deepseek_v32", "glm4_moe", "gpt_oss"};

TEST(PipelineFamilies, RtnReadsBackExactlyAndCopiesEveryOtherTensor) {
  for (const char* fam : kFamilies) {
    test::TempDir m(std::string("pfam_m_") + fam), q(std::string("pfam_q_") + fam);
    write_synthetic_model(m.path, tiny_moe_config(fam, 3), 51, DType::BF16);
    auto o = test::moe_quantize_options(m.path, q.path, 0);
    o.disable_opt_rtn = true;
    quantize_model(o);
    auto src = HfModel::open(m.path), dst = HfModel::open(q.path);
    const auto sb = test::tensor_bytes(m.path + "/model.safetensors");
    const auto qb = test::tensor_bytes(q.path + "/model.safetensors");
    const json qc = read_json_file(q.path + "/config.json")["quantization_config"];
    Context ctx(Device{}, 2);
    for (int64_t l = 0; l < src->config().num_layers; ++l) {
      const std::string pre = HfModel::layer_prefix(l);
      BlockWeights a = src->load_block(l, ctx), b = dst->load_block(l, ctx);
      const auto la = quant::block_linears(a), lb = quant::block_linears(b);
      ASSERT_EQ(la.size(), lb.size()) << fam << " layer " << l;
      for (size_t k = 0; k < la.size(); ++k) {
        const Tensor& wa = *la[k].second;
        ASSERT_TRUE(dst->has(pre + la[k].first + ".qweight")) << fam << ": " << pre + la[k].first;
        auto sh = quant::make_qdq_shape(wa.dim(0), wa.dim(1), 4, 32, true);
        std::vector<float> lo(size_t(sh.out * sh.groups())), hi(lo.size()), ref(size_t(wa.numel()));
        quant::qdq_minmax(ctx, sh, wa.f32(), lo.data(), hi.data());
        quant::qdq_fwd(ctx, sh, wa.f32(), nullptr, nullptr, nullptr, lo.data(), hi.data(), ref.data(), nullptr, nullptr);
        for (int64_t i = 0; i < wa.numel(); ++i)
          ASSERT_EQ(lb[k].second->f32()[i], ref[size_t(i)]) << fam << " " << pre << la[k].first << " i " << i;
      }
      for (const BlockTensor& t : a.tensors) {
        if (t.role == TensorRole::Linear) continue;
        const std::string name = t.stored.empty() ? pre + t.name : t.stored;
        EXPECT_TRUE(qb.count(name) && qb.at(name) == sb.at(name)) << fam << ": " << name << " not copied as stored";
        if (t.role == TensorRole::Kept) {
          EXPECT_EQ(qc["extra_config"][pre + t.module()], json({{"bits", 16}, {"data_type", "fp"}})) << qc.dump();
        }
      }
    }
  }
}

// SignRound lowers every block's loss and the quantized model's KL below RTN's; worlds 2 and 4 write the
// serial run's bytes.
TEST(PipelineFamilies, SignRoundBeatsRtnAndWorldsWriteTheSerialBytes) {
  for (const char* fam : kFamilies) {
    test::TempDir m(std::string("pfam_sr_") + fam), rtn(std::string("pfam_rtn_") + fam),
        sr(std::string("pfam_srq_") + fam);
    write_synthetic_model(m.path, tiny_moe_config(fam, 2), 52);
    auto o = test::moe_quantize_options(m.path, rtn.path, 0);
    o.disable_opt_rtn = true;
    quantize_model(o);
    o = test::moe_quantize_options(m.path, sr.path, 20);
    const QuantizeReport rep = quantize_model(o);
    for (const auto& b : rep.blocks) EXPECT_LT(b.loss_best, b.loss_first) << fam << " block " << b.index;
    const std::string serial = read_text_file(sr.path + "/model.safetensors");
    Context ctx(Device{}, 2);
    auto fp = HfModel::open(m.path), mq = HfModel::open(sr.path), mr = HfModel::open(rtn.path);
    Transformer tf(*fp, ctx, false), tq(*mq, ctx, false), tr(*mr, ctx, false);
    // English text (what the built-in calibration corpus holds), in the synthetic model's byte tokenizer.
    const std::vector<int32_t> ids = load_tokenizer(*fp)->encode(
        "The committee met on a Tuesday morning to discuss the new bridge. Several members argued that the "
        "river had changed its course over the years, and that the old plans no longer matched the land.");
    const double kl_sr = compare_models(tq, tf, ids, 32, 1).kl_mean, kl_rtn = compare_models(tr, tf, ids, 32, 1).kl_mean;
    EXPECT_LT(kl_sr, kl_rtn) << fam;
    std::printf("%s: KL to the FP model, SignRound %.5f, RTN %.5f\n", fam, kl_sr, kl_rtn);
    for (const char* world : {"2", "4"}) {
      o.parallel = parallel::ParallelSetting::parse(world);
      o.devices = std::string(world) == "2" ? "cpu:0,cpu:1" : "cpu:0,cpu:1,cpu:2,cpu:3";
      quantize_model(o);
      EXPECT_TRUE(read_text_file(sr.path + "/model.safetensors") == serial) << fam << " world " << world;
    }
  }
}

// The model rewritten in gpt-oss's released layout (transformers 5's fused experts): per layer
// gate_up_proj [E, C, 2I] with gate and up interleaved by column, down_proj [E, I, C], each expert's Linear
// transposed, and the biases gate_up_proj_bias [E, 2I] (interleaved), down_proj_bias [E, C].
void write_gpt_oss_fused_twin(const std::string& src, const std::string& dst) {
  fs::create_directories(dst);
  for (const char* f : {"config.json", "tokenizer.bin"}) fs::copy_file(src + "/" + f, dst + "/" + f);
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
  for (const auto& t : in->header().tensors)
    if (!moved.count(t.name)) {
      Tensor copy = Tensor::empty(t.shape, t.dtype, ctx);
      std::memcpy(copy.raw(), in->bytes(t), t.end - t.begin);
      out.push_back({t.name, copy});
    }
  write_safetensors(dst + "/model.safetensors", out);
}

// gpt-oss's released expert layout quantizes to the bytes of its per-expert twin (the layout AutoRound
// writes), biases written per expert, and both read back with the same logits.
TEST(PipelineFamilies, GptOssFusedExpertsWriteThePerExpertOutput) {
  test::TempDir m("pfam_oss"), f("pfam_oss_fused"), qm("pfam_oss_q"), qf("pfam_oss_fused_q");
  write_synthetic_model(m.path, tiny_moe_config("gpt_oss", 2), 54, DType::BF16);
  write_gpt_oss_fused_twin(m.path, f.path);
  ASSERT_TRUE(HfModel::open(f.path)->fused_experts(1));
  auto o = test::moe_quantize_options(m.path, qm.path, 3);
  quantize_model(o);
  o.model_dir = f.path;
  o.output_dir = qf.path;
  quantize_model(o);
  const auto a = test::tensor_bytes(qm.path + "/model.safetensors"), b = test::tensor_bytes(qf.path + "/model.safetensors");
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a) EXPECT_TRUE(b.count(name) && b.at(name) == bytes) << name;
  EXPECT_TRUE(a.count("model.layers.1.mlp.experts.7.down_proj.bias"));
  EXPECT_TRUE(a.count("model.layers.1.self_attn.sinks"));
  EXPECT_TRUE(a.count("model.layers.1.mlp.router.bias"));
  const json qc = read_json_file(qm.path + "/config.json")["quantization_config"];
  EXPECT_FALSE(qc.contains("extra_config") && qc["extra_config"].contains("model.layers.1.mlp.router")) << qc.dump();
}

// gpt-oss's release layout: the per-expert model's experts rounded to MXFP4 (per 32 inputs a power-of-two
// scale and E2M1 codes) and stored as gate_up_proj_blocks / _scales, down_proj_blocks / _scales with
// quant_method mxfp4 (to `mx`), and the same rounded values in bf16 one tensor per expert (to `twin`).
void write_gpt_oss_mxfp4_twins(const std::string& src, const std::string& mx, const std::string& twin) {
  for (const auto& d : {mx, twin}) {
    fs::create_directories(d);
    fs::copy_file(src + "/tokenizer.bin", d + "/tokenizer.bin");
  }
  json cfg = read_json_file(src + "/config.json");
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

// gpt-oss's MXFP4 release is quantized from its exact values: the bytes of quantizing its bf16 twin.
TEST(PipelineFamilies, GptOssMxfp4ReleaseQuantizesAsItsBf16Twin) {
  test::TempDir m("pfam_mx"), mx("pfam_mx_rel"), twin("pfam_mx_twin"), qx("pfam_mx_q"), qt("pfam_mx_twin_q");
  write_synthetic_model(m.path, tiny_moe_config("gpt_oss", 2), 55, DType::BF16);
  write_gpt_oss_mxfp4_twins(m.path, mx.path, twin.path);
  auto o = test::moe_quantize_options(mx.path, qx.path, 3);
  quantize_model(o);
  o.model_dir = twin.path;
  o.output_dir = qt.path;
  quantize_model(o);
  const auto a = test::tensor_bytes(qx.path + "/model.safetensors"), b = test::tensor_bytes(qt.path + "/model.safetensors");
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a) EXPECT_TRUE(b.count(name) && b.at(name) == bytes) << name;
  EXPECT_EQ(read_json_file(qx.path + "/config.json")["quantization_config"],
            read_json_file(qt.path + "/config.json")["quantization_config"]);
}

// gpt-oss in the float schemes: MXFP4 written as auto_round and llm_compressor reads back the same Linears
// (every expert packed, biases beside them), and FP8_STATIC gives each expert Linear its input scale; the
// quantized models run with finite logits near the FP model's.
TEST(PipelineFamilies, GptOssFloatSchemes) {
  test::TempDir m("pfam_ossfp"), q("pfam_ossfp_q"), s("pfam_ossfp_s");
  write_synthetic_model(m.path, tiny_moe_config("gpt_oss", 2), 56, DType::BF16);
  auto o = test::moe_quantize_options(m.path, q.path, 3);
  o.fmt = test::kFpSchemes[0].fmt;  // MXFP4
  o.format = "auto_round,llm_compressor";
  quantize_model(o);
  auto a = HfModel::open(q.path + "/auto-round"), b = HfModel::open(q.path + "/llm-compressor");
  Context ctx(Device{}, 2);
  for (int64_t l = 0; l < 2; ++l) {
    const BlockWeights wa = a->load_block(l, ctx), wb = b->load_block(l, ctx);
    const auto la = quant::block_linears(wa), lb = quant::block_linears(wb);
    ASSERT_EQ(la.size(), 4u + 3 * 8);
    for (size_t i = 0; i < la.size(); ++i)
      for (int64_t j = 0; j < la[i].second->numel(); ++j)
        ASSERT_EQ(la[i].second->f32()[j], lb[i].second->f32()[j]) << la[i].first << " [" << j << "]";
  }
  const auto t = test::tensor_bytes(q.path + "/llm-compressor/model.safetensors");
  EXPECT_TRUE(t.count("model.layers.1.mlp.experts.3.down_proj.weight_packed"));
  EXPECT_TRUE(t.count("model.layers.1.mlp.experts.3.down_proj.bias"));
  o = test::moe_quantize_options(m.path, s.path, 0);
  o.fmt = test::fp8_static_format();
  o.format = "llm_compressor";
  quantize_model(o);
  const auto f = test::tensor_bytes(s.path + "/model.safetensors");
  EXPECT_TRUE(f.count("model.layers.0.mlp.experts.5.up_proj.input_scale"));
  auto fp = HfModel::open(m.path);
  const std::vector<int32_t> ids = load_tokenizer(*fp)->encode("The river had changed its course over the years.");
  Transformer tf(*fp, ctx, false);
  for (const std::string& dir : {q.path + "/auto-round", s.path}) {
    auto mq = HfModel::open(dir);
    Transformer tq(*mq, ctx, false);
    const double kl = compare_models(tq, tf, ids, 16, 1).kl_mean;
    EXPECT_TRUE(std::isfinite(kl) && kl < 0.5) << dir << ": KL " << kl;
  }
}

// DeepSeek's and GLM's multi-token-prediction layers (stored past num_hidden_layers) are copied as stored.
TEST(PipelineFamilies, MtpLayersAreCopiedUnchanged) {
  test::TempDir m("pfam_mtp"), q("pfam_mtp_q");
  json c = tiny_moe_config("glm4_moe", 2);
  c["num_nextn_predict_layers"] = 1;
  write_synthetic_model(m.path, c, 53, DType::BF16);
  test::append_layer_copy(m.path, 1, 2);  // one stored MTP layer: layer 2 of a 2-layer model
  quantize_model(test::moe_quantize_options(m.path, q.path, 0));
  const auto sb = test::tensor_bytes(m.path + "/model.safetensors");
    const auto qb = test::tensor_bytes(q.path + "/model.safetensors");
  int copied = 0;
  for (const auto& [name, bytes] : sb)
    if (name.rfind("model.layers.2.", 0) == 0) {
      EXPECT_TRUE(qb.count(name) && qb.at(name) == bytes) << name;
      ++copied;
    }
  EXPECT_GT(copied, 10);
  json bad = c;
  bad["num_nextn_predict_layers"] = 0;
  write_file_atomic(m.path + "/config.json", bad.dump());
  EXPECT_NE(test::error_of([&] { HfModel::open(m.path); }).find("model.layers.2."), std::string::npos);
}

}  // namespace
