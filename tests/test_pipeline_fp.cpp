// The float schemes end to end: a tuned Linear packed as compressed-tensors stores it decodes (by the
// layout's own formula, independent of our reader) to the tuned QDQ weight bit for bit; a quantized
// synthetic model written as llm_compressor (and auto_round for MX/NVFP4) reads back through our loader
// to the reference QDQ of the source weights; configs carry the format names, the ignore list and the
// tile strategy; Linears a format cannot hold stay in 16 bit with the reason.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "block_fixture.h"
#include "fp_schemes.h"
#include "resume_check.h"
#include "core/dtype.h"
#include "core/small_float.h"
#include "export/shard_writer.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/float_export.h"
#include "pipeline/outputs.h"
#include "pipeline/quantize.h"

using namespace ar;
using namespace ar::quant;
using test::fp_format;
using test::FpScheme;
using test::kFpSchemes;
namespace fs = std::filesystem;

namespace {

std::vector<float> floats(const SafetensorsFile& f, const std::string& name) {
  const StTensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  size_t n = 1;
  for (int64_t d : t->shape) n *= size_t(d);
  std::vector<float> v(n);
  if (t->dtype == DType::U8 || t->dtype == DType::F8E4M3) {
    for (size_t i = 0; i < n; ++i) v[i] = float(f.bytes(*t)[i]);  // raw codes
  } else {
    convert_to_f32(f.bytes(*t), t->dtype, v.data(), n);
  }
  return v;
}

// The weight a packed Linear stands for, decoded from the files by the layout in float_export.h, with
// the QDQ's arithmetic for the step (NVFP4: 1 / (1 / (S * (1 / G)))).
std::vector<float> decode(const SafetensorsFile& f, const std::string& p, const FpQdqShape& sh) {
  const int64_t out = sh.out, in = sh.in, across = sh.tiles_across();
  std::vector<float> el(size_t(out * in)), w(el.size());
  if (sh.elem == FpElem::E2M1) {
    const std::vector<float> packed = floats(f, p + ".weight_packed");
    for (int64_t i = 0; i < out * in; ++i) {
      const uint8_t b = uint8_t(packed[size_t(i / 2)]);
      el[size_t(i)] = e2m1_decode(i % 2 ? uint8_t(b >> 4) : b);
    }
  } else {
    const std::vector<float> codes = floats(f, p + ".weight");
    for (size_t i = 0; i < el.size(); ++i) el[i] = e4m3_decode(uint8_t(codes[i]));
  }
  const std::vector<float> s = floats(f, p + ".weight_scale");
  const float G = sh.family == FpFamily::Nvfp4 ? floats(f, p + ".weight_global_scale")[0] : 0.f;
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < in; ++c) {
      const float sc = s[size_t((r / sh.tile_rows) * across + c / sh.tile_cols)];
      float step;
      if (sh.family == FpFamily::Nvfp4) step = 1.0f / (1.0f / (e4m3_decode(uint8_t(sc)) * (1.0f / G)));
      else if (sh.family == FpFamily::Fp8) step = sc;
      else step = e8m0_decode(uint8_t(sc));
      w[size_t(r * in + c)] = el[size_t(r * in + c)] * step;
    }
  return w;
}

// A small run of `fmt` written as `format` (4 x 32 calibration tokens, 2 threads).
QuantizeOptions fp_opts(const std::string& model, const std::string& out, const QuantFormat& fmt,
                        const std::string& format, int iters) {
  QuantizeOptions o;
  o.model_dir = model;
  o.output_dir = out;
  o.fmt = fmt;
  o.format = format;
  o.tune.iters = iters;
  o.disable_opt_rtn = iters == 0;  // plain RTN: comparable with the reference QDQ
  o.calib.nsamples = 4;
  o.calib.seqlen = 32;
  o.threads = 2;
  return o;
}

nlohmann::json config_of(const std::string& dir) {
  return nlohmann::json::parse(read_text_file(dir + "/config.json"));
}

}  // namespace

TEST(PipelineFp, TunedLinearsPackToTheirQdqWeightsExactly) {
  test::Fixture fx;
  for (const FpScheme& s : kFpSchemes) {
    BlockWeights b = fx.copy();
    const BlockTuneResult r = fx.tune(b, s.fmt, 6);
    const std::string dir = test::temp_path(std::string("fp_pack_") + s.name);
    fs::create_directories(dir);
    {
      ShardWriter w(dir, uint64_t(1) << 30);
      for (const TunedLinear& L : r.layers) pack_float_linear(fx.ctx, w, "m." + L.name, L);
      w.finish();
    }
    auto f = SafetensorsFile::open(dir + "/model.safetensors");
    for (const TunedLinear& L : r.layers) {
      const std::vector<float> w = decode(*f, "m." + L.name, *L.fp);
      for (int64_t i = 0; i < L.weight->numel(); ++i)
        ASSERT_EQ(w[size_t(i)], L.weight->f32()[i]) << s.name << " " << L.name << " at " << i;
    }
    fs::remove_all(dir);
  }
}

// RTN through the pipeline: our loader reads the llm_compressor output (as compressed-tensors decodes:
// bf16 of the product; FP8's product in fp32) back to the reference QDQ of the source weights (in bf16;
// FP8's exactly); NVFP4's product
// q * (S / G) may differ from the QDQ's in the last fp32 bit, so at most one bf16 ulp there.
TEST(PipelineFp, LlmCompressorOutputsReadBackToTheReferenceQdq) {
  const std::string m = test::temp_path("fp_model");
  write_synthetic_model(m, tiny_llama_config(2), 5);
  Context ctx(Device{}, 2);
  auto src = HfModel::open(m);
  for (const FpScheme& s : kFpSchemes) {
    const std::string q = test::temp_path(std::string("fp_out_") + s.name);
    const QuantizeOptions o = fp_opts(m, q, s.fmt, "llm_compressor", 0);
    quantize_model(o);
    const nlohmann::json qc = config_of(q)["quantization_config"];
    EXPECT_EQ(qc["quant_method"], "compressed-tensors") << s.name;
    EXPECT_EQ(qc["ignore"], nlohmann::json::array({"lm_head"})) << s.name;
    EXPECT_EQ(qc["config_groups"]["group_0"]["input_activations"], nullptr) << s.name;
    auto out = HfModel::open(q);
    ASSERT_NE(out->config().quant.fp, FloatQuant::None) << s.name;
    int64_t off_by_ulp = 0;
    for (int64_t l = 0; l < 2; ++l) {
      BlockWeights a = src->load_block(l, ctx), b = out->load_block(l, ctx);
      for (auto [wa, wb] : {std::pair{&a.wq, &b.wq}, std::pair{&a.wk, &b.wk}, std::pair{&a.wd, &b.wd}}) {
        FpQdqShape sh = fp_shape(s.fmt, wa->dim(0), wa->dim(1));
        if (sh.family == FpFamily::Nvfp4) {  // q, k, v share the smallest global scale
          sh.global_scale = nvfp4_global_scale(wa->f32(), wa->numel());
          if (wa != &a.wd)
            for (const Tensor* t : {&a.wq, &a.wk, &a.wv})
              sh.global_scale = std::min(sh.global_scale, nvfp4_global_scale(t->f32(), t->numel()));
        }
        std::vector<float> amax(size_t(sh.tiles())), ref(size_t(wa->numel()));
        fp_qdq_amax(sh, wa->f32(), amax.data());
        fp_qdq_fwd(sh, wa->f32(), nullptr, nullptr, nullptr, amax.data(), ref.data(), nullptr);
        for (int64_t i = 0; i < wa->numel(); ++i) {
          if (sh.family == FpFamily::Fp8) {  // e4m3 x scale in fp32, as transformers' default load computes it
            ASSERT_EQ(wb->f32()[i], ref[size_t(i)]) << s.name << " layer " << l << " at " << i;
            continue;
          }
          const uint16_t x = f32_to_bf16(ref[size_t(i)]), y = f32_to_bf16(wb->f32()[i]);
          ASSERT_EQ(bf16_to_f32(y), wb->f32()[i]) << s.name << ": the reader's weights are bf16 values";
          if (sh.family == FpFamily::Nvfp4 && ref[size_t(i)] == 0.0f) {  // stored as +0 (compressed-tensors)
            ASSERT_EQ(wb->f32()[i], 0.0f) << s.name << " layer " << l << " at " << i;
            continue;
          }
          if (sh.family == FpFamily::Nvfp4 && x != y) {
            ASSERT_EQ(std::abs(int(x) - int(y)), 1) << s.name << " layer " << l << " at " << i;
            ++off_by_ulp;
            continue;
          }
          ASSERT_EQ(x, y) << s.name << " layer " << l << " at " << i;
        }
      }
    }
    if (off_by_ulp) std::printf("%s: %lld elements one bf16 ulp off (q * (S / G) vs the QDQ's step)\n", s.name,
                                static_cast<long long>(off_by_ulp));
    fs::remove_all(q);
  }
  fs::remove_all(m);
}

// --format auto_round writes MX and NVFP4 with the same tensors under AutoRound's own config
// ("auto_round:llm_compressor"); both read back identically. A Linear whose width is not a multiple of
// the MX block stays in 16 bit, in compressed-tensors' ignore list and auto_round's extra_config.
TEST(PipelineFp, AutoRoundFormatAndKeptLinears) {
  const std::string m = test::temp_path("fp_model_kept");
  auto cfg = tiny_llama_config(1);
  cfg["intermediate_size"] = 80;  // down_proj in = 80: not a multiple of 32 (but of 16)
  write_synthetic_model(m, cfg, 6);
  Context ctx(Device{}, 2);
  for (const FpScheme& s : {kFpSchemes[0], kFpSchemes[3]}) {
    std::vector<std::string> dirs;
    for (const char* format : {"llm_compressor", "auto_round"}) {
      const std::string q = test::temp_path(std::string("fp_kept_") + s.name + format);
      const QuantizeOptions o = fp_opts(m, q, s.fmt, format, 2);
      quantize_model(o);
      dirs.push_back(q);
    }
    const nlohmann::json ct = config_of(dirs[0])["quantization_config"], ar = config_of(dirs[1])["quantization_config"];
    const bool mx = s.fmt.fp == FpFamily::Mx;
    EXPECT_EQ(ct["format"], mx ? "mxfp4-pack-quantized" : "nvfp4-pack-quantized");
    EXPECT_EQ(ar["packing_format"], "auto_round:llm_compressor");
    EXPECT_EQ(ar["data_type"], mx ? "mx_fp" : "nv_fp");
    const std::string down = "model.layers.0.mlp.down_proj";
    if (mx) {
      EXPECT_EQ(ct["ignore"], nlohmann::json::array({down, "lm_head"}));
      EXPECT_EQ(ar["extra_config"][down]["bits"], 16);
    } else {
      EXPECT_EQ(ct["ignore"], nlohmann::json::array({"lm_head"}));
    }
    auto a = HfModel::open(dirs[0]), b = HfModel::open(dirs[1]);
    EXPECT_EQ(a->has(down + ".weight_packed"), !mx);
    BlockWeights wa = a->load_block(0, ctx), wb = b->load_block(0, ctx);
    for (auto [x, y] : {std::pair{&wa.wq, &wb.wq}, std::pair{&wa.wd, &wb.wd}})
      for (int64_t i = 0; i < x->numel(); ++i) ASSERT_EQ(x->f32()[i], y->f32()[i]) << s.name << " at " << i;
    for (const auto& d : dirs) fs::remove_all(d);
  }
  fs::remove_all(m);
}

// AutoRound's own RTN outputs of the weight-only schemes (tests/data/float_rtn, made by
// tools/make_float_rtn_goldens.py with iters=0, disable_opt_rtn, act_bits=16, format llm_compressor):
// our run on the same model writes every weight tensor with the same dtype, shape and bytes, and the
// same weight quantization args. (The golden files hold the Linears' tensors only.) (AutoRound's configs still describe the presets' activations, and its
// NVFP4 output carries an input_global_scale; both belong to activation quantization, not built here.)
TEST(PipelineFp, RtnIsTensorIdenticalToAutoRound) {
  const std::string data = std::string(AR_SOURCE_DIR) + "/tests/data/float_rtn/";
  const std::string m = test::temp_path("fp_rtn_source");
  fs::create_directories(m);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(data + "source/" + f, m + "/" + f);
  for (const auto& e : fs::directory_iterator(std::string(AR_SOURCE_DIR) + "/tests/data/autoround_golden/tokenizer"))
    fs::copy_file(e.path(), m + "/" + e.path().filename().string());
  const std::pair<const char*, QuantFormat> cases[] = {
      {"mxfp4", fp_format(FpFamily::Mx, 4, 32)},   {"mxfp8", fp_format(FpFamily::Mx, 8, 32)},
      {"nvfp4", fp_format(FpFamily::Nvfp4, 4, 16)}, {"fpw8a16", fp_format(FpFamily::Fp8, 8, 0)},
      {"fp8_channel", fp_format(FpFamily::Fp8, 8, -1)},
  };
  for (const auto& [name, fmt] : cases) {
    const std::string q = test::temp_path(std::string("fp_rtn_") + name);
    const QuantizeOptions o = fp_opts(m, q, fmt, "llm_compressor", 0);
    quantize_model(o);
    auto theirs = SafetensorsFile::open(data + name + "/model.safetensors");
    auto ours = SafetensorsFile::open(q + "/model.safetensors");
    int64_t compared = 0;
    for (const auto& t : theirs->header().tensors) {
      if (t.name.find(".input_") != std::string::npos) continue;  // activation quantization
      const StTensorInfo* u = ours->find(t.name);
      ASSERT_NE(u, nullptr) << name << ": we do not write " << t.name;
      EXPECT_EQ(dtype_name(u->dtype), std::string(dtype_name(t.dtype))) << name << " " << t.name;
      EXPECT_EQ(u->shape, t.shape) << name << " " << t.name;
      ASSERT_EQ(u->end - u->begin, t.end - t.begin) << name << " " << t.name;
      EXPECT_EQ(0, std::memcmp(ours->bytes(*u), theirs->bytes(t), size_t(t.end - t.begin))) << name << " " << t.name;
      ++compared;
    }
    int64_t our_linear_tensors = 0;  // the golden files keep the Linears' tensors only
    for (const auto& t : ours->header().tensors) our_linear_tensors += t.name.find("_proj.") != std::string::npos;
    EXPECT_EQ(compared, our_linear_tensors) << name << ": we write Linear tensors AutoRound does not";
    const nlohmann::json a = config_of(data + name)["quantization_config"], b = config_of(q)["quantization_config"];
    // AutoRound writes FPW8A16 (weight-only by preset) as naive-quantized, as we write every weight-only
    // FP8; its FP8_STATIC with act_bits 16 keeps the preset's float-quantized and activation args.
    if (std::string(name) != "fp8_channel") {
      EXPECT_EQ(a["format"], b["format"]) << name;
    }
    EXPECT_EQ(a["config_groups"]["group_0"]["weights"], b["config_groups"]["group_0"]["weights"]) << name;
    fs::remove_all(q);
  }
  fs::remove_all(m);
}

// --resume with a float scheme: the state's writers hold weight_packed / weight_scale /
// weight_global_scale tensors, which the resume check accepts as the packing of a model Linear; the
// resumed output is byte-identical to an uninterrupted run.
TEST(PipelineFp, ResumeAfterSigkillIsByteIdentical) {
  const std::string m = test::temp_path("fp_resume_model"), ref = test::temp_path("fp_resume_ref"),
                    q = test::temp_path("fp_resume_q");
  auto cfg = tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  write_synthetic_model(m, cfg, 12);
  QuantizeOptions o = fp_opts(m, ref, fp_format(FpFamily::Nvfp4, 4, 16), "llm_compressor,fake", 40);
  o.calib.nsamples = 8;
  o.calib.seqlen = 64;
  test::expect_resume_matches_uninterrupted(o, q, 4, {"/llm-compressor", "/fake"});
  for (const auto& d : {m, ref, q}) fs::remove_all(d);
}

// --quant_lm_head with a float scheme: lm_head tuned (its loss drops), packed like the block Linears,
// absent from compressed-tensors' ignore list and listed in auto_round's extra_config, and read back by
// our loader to the fake output's weights (fp16 of the QDQ: MXFP4's values are exact in fp16).
TEST(PipelineFp, QuantLmHeadTunesPacksAndLoadsBack) {
  const std::string m = test::temp_path("fp_lm_model");
  auto cfg = tiny_llama_config(1);
  cfg["vocab_size"] = 320;
  write_synthetic_model(m, cfg, 14);
  Context ctx(Device{}, 2);
  QuantizeOptions o = fp_opts(m, test::temp_path("fp_lm_out"), fp_format(FpFamily::Mx, 4, 32),
                              "llm_compressor,auto_round,fake", 6);
  o.quant_lm_head = true;
  const QuantizeReport r = quantize_model(o);
  ASSERT_TRUE(r.lm_head_quantized);
  EXPECT_LT(r.lm_head_loss_best, r.lm_head_loss_first);
  const std::string lc = o.output_dir + "/llm-compressor", ar = o.output_dir + "/auto-round", fk = o.output_dir + "/fake";
  EXPECT_EQ(config_of(lc)["quantization_config"]["ignore"], nlohmann::json::array());
  EXPECT_EQ(config_of(ar)["quantization_config"]["extra_config"]["lm_head"]["data_type"], "mx_fp");
  auto a = HfModel::open(lc), b = HfModel::open(ar), f = HfModel::open(fk), m0 = HfModel::open(m);
  EXPECT_TRUE(a->has("lm_head.weight_packed"));
  const Tensor ha = a->load_lm_head(ctx), hb = b->load_lm_head(ctx), hf = f->load_lm_head(ctx), h0 = m0->load_lm_head(ctx);
  double moved = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    ASSERT_EQ(ha.f32()[i], hf.f32()[i]) << i;
    ASSERT_EQ(hb.f32()[i], hf.f32()[i]) << i;
    moved = std::max(moved, double(std::fabs(ha.f32()[i] - h0.f32()[i])));
  }
  EXPECT_GT(moved, 1e-4);
  fs::remove_all(m);
  fs::remove_all(o.output_dir);
}

TEST(PipelineFp, FormatsThatCannotHoldTheSchemeAreRefused) {
  QuantizeOptions o;
  o.fmt = fp_format(FpFamily::Nvfp4, 4, 16);
  for (const char* f : {"auto_gptq", "auto_awq", "gguf:q4_k_m"}) {
    o.format = f;
    EXPECT_THROW(parse_formats(o), Error) << f;
  }
  o.fmt = fp_format(FpFamily::Fp8, 8, -1);
  o.format = "auto_round";
  EXPECT_THROW(parse_formats(o), Error);
  o.format = "llm_compressor,fake";
  EXPECT_EQ(parse_formats(o).size(), 2u);
  o.fmt = QuantFormat(4, 128, true);
  o.format = "llm_compressor";
  EXPECT_THROW(parse_formats(o), Error);
}
