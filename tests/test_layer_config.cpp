// --layer_config (pipeline/layer_config.h): the text read as AutoRound 0.16.1 reads it (goldens from
// tools/make_layer_config_goldens.py: its parse_layer_config_arg, to_standard_regex and re.search),
// AutoRound's precedence between patterns, --fp_layers and exact names, refusals, and the run: every
// Linear packed in its own format, described in extra_config / gptq's dynamic, and read back exactly.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/layer_config.h"
#include "pipeline/outputs.h"
#include "pipeline/quantize.h"
#include "pipeline/run_steps.h"
#include "pipeline/run_summary.h"
#include "quant/qdq.h"
#include "quantize_options.h"
#include "resume_check.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
const std::string kGoldens = std::string(AR_SOURCE_DIR) + "/tests/data/layer_config/goldens.json";

// What AutoRound's parsed value says of bits, group_size and sym (a preset name expanded).
void expected_keys(const nlohmann::ordered_json& v, std::optional<int>* bits, std::optional<int64_t>* group, std::optional<bool>* sym) {
  auto preset = [&](const std::string& p) {
    if (p == "BF16") *bits = 16;
    else *bits = p[1] - '0', *group = 128, *sym = true;
  };
  if (v.is_string()) return preset(v.get<std::string>());
  if (v.contains("scheme")) preset(v["scheme"].get<std::string>());
  if (v.contains("bits")) *bits = v["bits"].get<int>();
  if (v.contains("group_size")) *group = v["group_size"].get<int64_t>();
  if (v.contains("sym")) *sym = v["sym"].get<bool>();
}

std::string expect_refused(const std::string& text) {
  try {
    LayerConfig::parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << text;
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

// The round-to-nearest QDQ of w in a format, as the plain RTN run writes it.
std::vector<float> rtn(Context& ctx, const Tensor& w, int bits, int64_t group, bool sym) {
  auto sh = quant::make_qdq_shape(w.dim(0), w.dim(1), bits, group, sym);
  std::vector<float> lo(size_t(sh.out * sh.groups())), hi(lo.size()), ref(size_t(w.numel()));
  quant::qdq_minmax(ctx, sh, w.f32(), lo.data(), hi.data());
  quant::qdq_fwd(ctx, sh, w.f32(), nullptr, nullptr, nullptr, lo.data(), hi.data(), ref.data(), nullptr, nullptr);
  return ref;
}

// A run's options: the small calibration, the formats and the --layer_config text.
QuantizeOptions run_opts(const std::string& m, const std::string& q, int iters, const std::string& formats,
                         const std::string& layer_config) {
  QuantizeOptions o = test::small_quantize_options(m, q, iters);
  o.format = formats;
  o.overwrite = true;
  o.layer_config = LayerConfig::parse(layer_config);
  return o;
}

std::string notes_of(const QuantizeReport& rep) {
  std::string notes;
  for (const auto& n : rep.notes) notes += n + "\n";
  return notes;
}

json config_of(const std::string& dir) { return json::parse(read_text_file(dir + "/config.json"))["quantization_config"]; }
}  // namespace

TEST(LayerConfig, ReadsTheTextAsAutoRoundDoes) {
  const nlohmann::ordered_json g = nlohmann::ordered_json::parse(read_text_file(kGoldens));  // keys in order
  std::vector<std::string> names;
  for (const auto& n : g["names"]) names.push_back(n.get<std::string>());
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    LayerConfig lc = LayerConfig::parse(text);
    lc.bind({});  // every key a pattern, as AutoRound's resolver matches keys against its layer names
    ASSERT_EQ(lc.entries().size(), c["parsed"].size()) << text;
    size_t i = 0;
    for (auto it = c["parsed"].begin(); it != c["parsed"].end(); ++it, ++i) {
      const LayerConfigEntry& e = lc.entries()[i];
      EXPECT_EQ(e.key, it.key()) << text;
      EXPECT_EQ(e.regex, c["regex"][it.key()].get<std::string>()) << text;
      std::optional<int> bits;
      std::optional<int64_t> group;
      std::optional<bool> sym;
      expected_keys(it.value(), &bits, &group, &sym);
      if (it.value().is_object() && it.value().value("data_type", "") == "fp") bits = 16;
      EXPECT_EQ(e.bits, bits) << text << " " << e.key;
      EXPECT_EQ(e.group_size, group) << text << " " << e.key;
      EXPECT_EQ(e.sym, sym) << text << " " << e.key;
      std::vector<std::string> found;
      for (const auto& n : names)
        if (lc.matches(i, n)) found.push_back(n);
      EXPECT_EQ(nlohmann::ordered_json(found), c["matches"][it.key()]) << text << " " << e.key;
    }
  }
  EXPECT_TRUE(LayerConfig::parse("").empty());
  EXPECT_TRUE(LayerConfig::parse("  {}  ").empty());
}

TEST(LayerConfig, RefusesWhatItCannotHonour) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"{mlp: {bits: 5}}", "bits 5 is not supported"},
           {"{mlp: {bitz: 4}}", "unknown key 'bitz'"},
           {"{mlp: MXFP4}", "scheme 'MXFP4' is not a per-layer scheme"},
           {"{mlp: {data_type: nv_fp}}", "data_type 'nv_fp'"},
           {"{mlp: {bits: 4, data_type: fp}}", "float scheme"},
           {"{mlp: {act_bits: 8}}", "activation quantization"},
           {"{mlp: {group_size: 0}}", "group_size 0"},
           {"{mlp: {sym: maybe}}", "sym must be true or false"},
           {"{mlp: {bits: four}}", "bits must be an integer"},
           {"{mlp: null}", "no scheme"},
           {"{mlp: {}}", "sets nothing"},
           {"{(mlp: {bits: 8}}", "not a pattern this tool reads"},
           {"{mlp: {bits: 8}", "unexpected end"},
           {"[1, 2]", "must be a dict"},
           {"{a: {b: {c: 1}}}", "nest at most two deep"},
           // 2^64-1 read as an int64 would wrap to -1 (per channel)
           {R"({"q_proj":{"group_size":18446744073709551615}})", "group_size 18446744073709551615 is out of range"},
           {R"({"q_proj":{"bits":9223372036854775808}})", "bits 9223372036854775808 is out of range"},
           // a repeated key would take its last value silently
           {R"({"q_proj":{"bits":4},"q_proj":{"bits":8}})", "layer 'q_proj' appears twice"},
           {R"({"q_proj":{"bits":4,"bits":8}})", "key 'bits' appears twice"},
           {"{q_proj: {bits: 4}, q_proj: W8A16}", "layer 'q_proj' appears twice"},
           {"{q_proj: {bits: 4, bits: 8}}", "key 'bits' appears twice"},
           // libstdc++ reads a back-reference's digits into a long: 20 digits overflowed it (UBSan, the fuzzer)
           {R"({"mlp.*\\64666666666666666666": {"bits": 8}})", "escaped digit"},
           {R"({"(x)\\1": {"bits": 8}})", "escaped digit"},
       })
    EXPECT_NE(expect_refused(text).find(says), std::string::npos) << text << " -> " << expect_refused(text);
  std::string deep = "{" + std::string(40, '(') + "x" + std::string(40, ')') + ": {bits: 8}}";
  EXPECT_NE(expect_refused(deep).find("nested more than"), std::string::npos);
}

// AutoRound's resolver: --fp_layers forces 16 bit under exact names, then every pattern overwrites the
// Linears it matches, in order; the rules of the shapes and loaders run on the result.
TEST(LayerConfig, PatternsThenFpLayersThenExactNames) {
  QuantizeOptions o;
  o.fmt = {4, 32, true};
  o.fp_layers = {"layers.2."};
  o.layer_config = LayerConfig::parse(
      "{model.layers.1.mlp.down_proj: {bits: 2}, model.layers.2.mlp.up_proj: {bits: 3},"
      " mlp.down_proj: {bits: 8}, layers.3.mlp.down_proj: {group_size: 64, sym: false},"
      " self_attn.q_proj: BF16, layers.0.self_attn: {bits: 16}, o_proj: {group_size: 48}}");
  o.layer_config.bind({"model.layers.1.mlp.down_proj", "model.layers.2.mlp.up_proj", "model.layers.3.mlp.down_proj"});
  const LayerRules r = LayerRules::of(o);
  auto fmt = [&](const std::string& n, int64_t out = 64, int64_t in = 128) { return layer_choice(n, out, in, r); };
  EXPECT_EQ(fmt("model.layers.1.mlp.down_proj").fmt.bits, 8);  // the pattern wins over the exact name
  EXPECT_EQ(fmt("model.layers.2.mlp.up_proj").kept, "--fp_layers layers.2.");  // --fp_layers over the exact name
  EXPECT_EQ(fmt("model.layers.2.mlp.down_proj").fmt.bits, 8);  // a pattern over --fp_layers
  const LayerChoice d3 = fmt("model.layers.3.mlp.down_proj");
  EXPECT_EQ(d3.entry->key, "layers.3.mlp.down_proj");  // the last match decides alone: what it does not
  EXPECT_EQ(d3.fmt.bits, 4);                            // set is the run's, not the earlier match's
  EXPECT_EQ(d3.fmt.group_size, 64);
  EXPECT_FALSE(d3.fmt.sym);
  EXPECT_EQ(fmt("model.layers.0.self_attn.q_proj").kept, "--layer_config layers.0.self_attn");  // last match
  EXPECT_EQ(fmt("model.layers.1.self_attn.q_proj").kept, "--layer_config self_attn.q_proj");
  const LayerChoice k = fmt("model.layers.1.self_attn.k_proj");
  EXPECT_TRUE(k.kept.empty());
  EXPECT_EQ(k.entry, nullptr);
  EXPECT_EQ(k.fmt.bits, 4);
  // The loader rules read each Linear's own group size: 128 / 48 is no whole number of groups.
  EXPECT_EQ(fmt("model.layers.1.self_attn.o_proj").kept,
            "in_features 128 not a multiple of group_size 48: a partial last group loads in neither "
            "transformers/auto-round, gptqmodel nor vLLM (auto_round)");
  EXPECT_EQ(fmt("model.layers.1.mlp.gate_proj", 40, 64).kept, "shape [40, 64] not a multiple of 32");
  // An entry at 8 bits that inherits asymmetry is pinned to sym, as AutoRound pins it.
  o.fmt = {8, 32, false};
  o.layer_config = LayerConfig::parse("{down_proj: {group_size: 64}, up_proj: {bits: 4}}");
  const LayerRules r8 = LayerRules::of(o);
  EXPECT_TRUE(layer_choice("model.layers.0.mlp.down_proj", 64, 128, r8).fmt.sym);
  EXPECT_FALSE(layer_choice("model.layers.0.mlp.up_proj", 128, 64, r8).fmt.sym);
  EXPECT_FALSE(layer_choice("model.layers.0.mlp.gate_proj", 128, 64, r8).fmt.sym);  // the run's own scheme
}

TEST(LayerConfig, FormatsThatCannotHoldItAreRefused) {
  QuantizeOptions o;
  o.fmt = {4, 128, true};
  auto refused = [&](const std::string& format, const std::string& text, const std::string& says) {
    o.format = format;
    o.layer_config = LayerConfig::parse(text);
    try {
      parse_formats(o);
      ADD_FAILURE() << format << " accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("auto_awq", "{down_proj: {bits: 8}}", "AWQ layout");
  refused("auto_round,gguf:q4_k_m", "{down_proj: {bits: 8}}", "takes each tensor's type from the preset");
  refused("auto_round", "{down_proj: {bits: 8, sym: false}}", "8-bit asymmetric");
  o.fmt.sym = false;  // asymmetric 4-bit auto_round is written in the AWQ layout
  refused("auto_round", "{down_proj: {group_size: 32}}", "asymmetric 4-bit auto_round");
  o.fmt = {4, 32, true};
  o.fmt.fp = quant::FpFamily::Mx;
  refused("auto_round", "{down_proj: W8A16}", "per-layer formats are for the int schemes");
  // Keeping Linears in 16 bit is what every format can say.
  for (const char* f : {"auto_awq", "auto_round"}) {
    o.format = f;
    if (std::string(f) == "auto_awq") o.fmt = {4, 128, true};
    o.layer_config = LayerConfig::parse("{down_proj: BF16}");
    EXPECT_NO_THROW(parse_formats(o)) << f;
  }
}

// Plain RTN with per-layer formats: every packed output reads back to exactly the QDQ of each Linear
// in its own format; extra_config and gptq's dynamic hold what differs from the run's scheme; the
// summary names the own formats; the resume fingerprint changes with the text.
TEST(PipelineLayerConfig, EachLinearIsPackedInItsOwnFormatAndReadsBackExactly) {
  const std::string m = test::temp_path("lc_m"), q = test::temp_path("lc_q");
  write_synthetic_model(m, tiny_llama_config(2), 5);
  auto o = run_opts(m, q, 0, "auto_round,auto_gptq,fake",
                    "{mlp.down_proj: {bits: 8}, layers.1.self_attn.q_proj: {group_size: 64, sym: false},"
                    " model.layers.0.mlp.up_proj: BF16, k_proj: {bits: 2, group_size: -1}}");
  o.disable_opt_rtn = true;
  // What the loaders measured do with these outputs (docs/quantization.md).
  const std::string notes = notes_of(quantize_model(o));
  EXPECT_NE(notes.find("transformers' GPTQ loader (optimum) builds every Linear at --bits"), std::string::npos) << notes;
  EXPECT_NE(notes.find("asymmetric Linears in a symmetric file"), std::string::npos) << notes;
  struct Want {
    int bits;
    int64_t group;
    bool sym;
  };
  auto want = [](int64_t l, const std::string& n) -> std::optional<Want> {
    if (n == "mlp.down_proj") return Want{8, 32, true};
    if (n == "self_attn.k_proj") return Want{2, -1, true};
    if (n == "self_attn.q_proj" && l == 1) return Want{4, 64, false};
    if (n == "mlp.up_proj" && l == 0) return std::nullopt;
    return Want{4, 32, true};
  };
  auto src = HfModel::open(m);
  Context ctx(Device{}, 2);
  for (const char* dir : {"auto-round", "auto-gptq"}) {
    auto dst = HfModel::open(q + "/" + dir);
    for (int64_t l = 0; l < 2; ++l) {
      BlockWeights a = src->load_block(l, ctx), b = dst->load_block(l, ctx);
      const auto la = quant::block_linears(a), lb = quant::block_linears(b);
      for (size_t k = 0; k < la.size(); ++k) {
        const std::string full = HfModel::layer_prefix(l) + la[k].first;
        const auto w = want(l, la[k].first);
        EXPECT_EQ(dst->has(full + ".qweight"), w.has_value()) << dir << " " << full;
        std::vector<float> ref(la[k].second->f32(), la[k].second->f32() + la[k].second->numel());
        if (w) ref = rtn(ctx, *la[k].second, w->bits, w->group, w->sym);
        else if (std::string(dir) == "auto-gptq")  // the GPTQ outputs are fp16 throughout
          for (float& v : ref) v = f16_to_f32(f32_to_f16(v));
        for (int64_t i = 0; i < la[k].second->numel(); ++i)
          ASSERT_EQ(lb[k].second->f32()[i], ref[size_t(i)]) << dir << " " << full << " i " << i;
      }
    }
  }
  const json ar = config_of(q + "/auto-round"), gq = config_of(q + "/auto-gptq");
  EXPECT_EQ(ar["bits"], 4);
  EXPECT_EQ(ar["extra_config"]["model.layers.0.mlp.down_proj"], json({{"bits", 8}}));
  EXPECT_EQ(ar["extra_config"]["model.layers.1.self_attn.q_proj"], json({{"group_size", 64}, {"sym", false}}));
  EXPECT_EQ(ar["extra_config"]["model.layers.0.self_attn.k_proj"], json({{"bits", 2}, {"group_size", -1}}));
  EXPECT_EQ(ar["extra_config"]["model.layers.0.mlp.up_proj"], json({{"bits", 16}, {"data_type", "fp"}}));
  EXPECT_FALSE(ar["extra_config"].contains("model.layers.1.mlp.up_proj"));
  EXPECT_EQ(gq["dynamic"]["+:model\\.layers\\.1\\.mlp\\.down_proj"], json({{"bits", 8}, {"group_size", 32}, {"sym", true}}));
  EXPECT_EQ(gq["dynamic"]["+:model\\.layers\\.1\\.self_attn\\.q_proj"], json({{"bits", 4}, {"group_size", 64}, {"sym", false}}));
  EXPECT_EQ(gq["dynamic"]["-:model\\.layers\\.0\\.mlp\\.up_proj"], json::object());
  EXPECT_EQ(gq["modules_in_block_to_quantize"].size(), 1u);

  auto cfg = parse_model_config(tiny_llama_config(2), "c");
  bool own = false;
  for (const auto& l : run_summary(cfg, o, 8, 64, false))
    if (l.rfind("own formats: ", 0) == 0) {
      own = true;
      EXPECT_NE(l.find("mlp.down_proj W8G32 sym in every block (--layer_config mlp.down_proj)"), std::string::npos) << l;
      EXPECT_NE(l.find("self_attn.q_proj W4G64 asym in 1 of 2 blocks"), std::string::npos) << l;
    }
  EXPECT_TRUE(own);
  quant::CalibData calib;
  const auto with = steps::run_fingerprint(o, calib, false, 1);
  o.layer_config = LayerConfig::parse("{mlp.down_proj: {bits: 3}}");
  EXPECT_NE(steps::run_fingerprint(o, calib, false, 1), with);
  o.layer_config = LayerConfig{};
  EXPECT_FALSE(steps::run_fingerprint(o, calib, false, 1).contains("layer_config"));  // old states still resume
  fs::remove_all(m);
  fs::remove_all(q);
}

// SignRound over a MoE block with experts in their own formats and one expert kept: the tuned
// experts are packed at their bits, the auto_round and auto_gptq outputs read back to the same
// weights, and an lm_head entry turns its quantization on, as in AutoRound. "mlp.gate" is a substring
// pattern: it finds the dense layer's mlp.gate_proj, not the router (which is no Linear to quantize).
TEST(PipelineLayerConfig, TunedExpertsKeepTheirOwnFormats) {
  const std::string m = test::temp_path("lc_moe_m"), q = test::temp_path("lc_moe_q");
  json mc = tiny_moe_config("qwen3_moe");
  mc["vocab_size"] = 320;  // lm_head [320, 64]: whole 32-multiples
  write_synthetic_model(m, mc, 9, DType::BF16);
  auto o = run_opts(m, q, 2, "auto_round,auto_gptq",
                    "{\"experts.[0-3].down_proj\": {\"bits\": 8}, \"layers.1.mlp.experts.5.\": \"BF16\", "
                    "\"lm_head\": {\"bits\": 8, \"group_size\": 64}, \"mlp.gate\": {\"bits\": 8}}");
  o.calib.seqlen = 32;
  const QuantizeReport rep = quantize_model(o);
  EXPECT_TRUE(rep.lm_head_quantized);
  auto a = HfModel::open(q + "/auto-round"), g = HfModel::open(q + "/auto-gptq");
  const ModelConfig& c = a->config();
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.is_moe_layer(l)) {
      const std::string gate = HfModel::layer_prefix(l) + "mlp.gate_proj.qweight";
      EXPECT_EQ(a->info(gate)->shape, (Shape{c.hidden_size * 8 / 32, c.intermediate_size})) << gate;
      continue;
    }
    ++moe_layers;
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      const std::string pre = HfModel::layer_prefix(l) + "mlp.experts." + std::to_string(e) + ".";
      const bool kept = l == 1 && e == 5;
      EXPECT_EQ(a->has(pre + "down_proj.qweight"), !kept) << pre;
      if (kept) continue;
      const int64_t in = c.moe.expert_intermediate, bits = e < 4 ? 8 : 4;
      EXPECT_EQ(a->info(pre + "down_proj.qweight")->shape, (Shape{in * bits / 32, c.hidden_size})) << pre;
      EXPECT_EQ(a->info(pre + "gate_proj.qweight")->shape, (Shape{c.hidden_size * 4 / 32, in})) << pre;
    }
  }
  EXPECT_GT(moe_layers, 0);
  EXPECT_EQ(a->info("lm_head.qweight")->shape, (Shape{c.hidden_size * 8 / 32, c.vocab_size}));
  EXPECT_EQ(config_of(q + "/auto-round")["extra_config"]["lm_head"],
            json({{"bits", 8}, {"group_size", 64}, {"sym", true}, {"data_type", "int"}}));
  Context ctx(Device{}, 2);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    BlockWeights x = a->load_block(l, ctx), y = g->load_block(l, ctx);
    const auto lx = quant::block_linears(x), ly = quant::block_linears(y);
    for (size_t k = 0; k < lx.size(); ++k)
      for (int64_t i = 0; i < lx[k].second->numel(); ++i)
        ASSERT_EQ(lx[k].second->f32()[i], ly[k].second->f32()[i]) << l << " " << lx[k].first << " i " << i;
  }
  Tensor ha = a->load_lm_head(ctx), hg = g->load_lm_head(ctx);
  for (int64_t i = 0; i < ha.numel(); ++i) ASSERT_EQ(ha.f32()[i], hg.f32()[i]) << "lm_head i " << i;
  fs::remove_all(m);
  fs::remove_all(q);
}

// The data-parallel lane tunes each Linear in its own format as the serial run does: byte-identical
// outputs (deterministic tuning), and the report lists the own formats per block.
TEST(PipelineLayerConfig, WorldsWriteTheSerialBytes) {
  const std::string m = test::temp_path("lc_w_m");
  write_synthetic_model(m, tiny_llama_config(2), 6);
  std::string bytes[2];
  for (int w = 0; w < 2; ++w) {
    const std::string q = test::temp_path("lc_w_q" + std::to_string(w));
    auto o = run_opts(m, q, 3, "auto_round", "{mlp.down_proj: {bits: 2, group_size: 64}, q_proj: {sym: false, bits: 3}}");
    o.report_path = q + ".json";
    if (w == 1) {
      o.parallel = parallel::ParallelSetting::parse("2");
      o.devices = "cpu:0,cpu:1";
    }
    const QuantizeReport rep = quantize_model(o);
    EXPECT_EQ(rep.blocks[0].world_tune, w + 1);
    bytes[w] = read_text_file(q + "/model.safetensors");
    const json r = json::parse(read_text_file(q + ".json"));
    EXPECT_EQ(r["blocks"][1]["own_formats"]["model.layers.1.mlp.down_proj"], "W2G64 sym") << r["blocks"][1].dump();
    EXPECT_EQ(r["blocks"][1]["own_formats"]["model.layers.1.self_attn.q_proj"], "W3G32 asym");
    fs::remove_all(q);
    fs::remove(q + ".json");
  }
  EXPECT_TRUE(bytes[0] == bytes[1]) << "world 2 wrote other bytes than serial";
  fs::remove_all(m);
}

// --resume: extra_config lists its Linears in the order an uninterrupted run writes them (block by block,
// each block's in its own order: q_proj before down_proj, which sorted keys would reverse), so the
// resumed config.json and quantization_config.json are the same bytes.
TEST(PipelineLayerConfig, ResumeKeepsTheExtraConfigOrder) {
  const std::string m = test::temp_path("lc_resume_m"), ref = test::temp_path("lc_resume_ref"),
                    q = test::temp_path("lc_resume_q");
  auto cfg = tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  write_synthetic_model(m, cfg, 31);
  auto o = run_opts(m, ref, 30, "auto_round,auto_gptq", "{q_proj: {bits: 8}, down_proj: {bits: 2, group_size: 64}}");
  test::expect_resume_matches_uninterrupted(o, q, 4, {"/auto-round", "/auto-gptq"});
  const nlohmann::ordered_json extra =
      nlohmann::ordered_json::parse(read_text_file(q + "/auto-round/config.json"))["quantization_config"]["extra_config"];
  ASSERT_GE(extra.size(), 2u);
  EXPECT_EQ(extra.begin().key(), "model.layers.0.self_attn.q_proj") << extra.dump();
  for (const auto& d : {m, ref, q}) fs::remove_all(d);
}

TEST(PipelineLayerConfig, AnEntryMatchingNothingIsNoted) {
  const std::string m = test::temp_path("lc_none_m"), q = test::temp_path("lc_none_q");
  write_synthetic_model(m, tiny_moe_config("qwen3_moe"), 9, DType::BF16);
  auto o = run_opts(m, q, 0, "auto_round", "{\"mlp.gate$\": {\"bits\": 8}, \"no_such_layer\": {\"bits\": 8}}");
  o.calib.seqlen = 32;
  const std::string notes = notes_of(quantize_model(o));
  EXPECT_NE(notes.find("'mlp.gate$' matches no quantizable Linear of this model: a MoE router and "
                       "shared_expert_gate stay in 16 bit"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("'no_such_layer' matches no quantizable Linear of this model; ignored"), std::string::npos)
      << notes;
  fs::remove_all(q);
  fs::remove_all(m);
  // --fp_layers substrings likewise (a Mixtral, whose router name is no Linear's substring): llama.cpp's
  // name for q_proj, the router's, and one that keeps a Linear
  write_synthetic_model(m, tiny_moe_config("mixtral"), 9, DType::BF16);
  o = run_opts(m, q, 0, "auto_round", "");
  o.calib.seqlen = 32;
  o.fp_layers = {"attention.wq", "block_sparse_moe.gate", "layers.1.self_attn.o_proj"};
  const std::string fp_notes = notes_of(quantize_model(o));
  EXPECT_NE(fp_notes.find("--fp_layers 'attention.wq' is in no Linear's name of this model (names read like "
                          "model.layers.1.block_sparse_moe.experts."),
            std::string::npos)
      << fp_notes;
  EXPECT_NE(fp_notes.find("--fp_layers 'block_sparse_moe.gate' is in no Linear's name of this model (a MoE router"),
            std::string::npos)
      << fp_notes;
  EXPECT_EQ(fp_notes.find("o_proj"), std::string::npos) << fp_notes;
  fs::remove_all(m);
  fs::remove_all(q);
}
