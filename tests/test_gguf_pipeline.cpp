// `--format gguf:<preset>` end to end on a generated Llama with 256-multiple widths: the file holds
// every tensor under llama.cpp's name in the type the preset gives it; round-to-nearest
// (--disable_opt_rtn) writes exactly gguf_quantize_rtn's bytes of the source weights (q/k rows in
// llama.cpp's order); the imatrix search (--iters 0) and SignRound through the GGUF types lower every
// block's loss or error and write valid blocks; combinations not supported yet are
// refused before anything is written.
#include <filesystem>

#include "core/error.h"
#include "export/gguf_model.h"
#include "io/gguf.h"
#include "io/mapped_file.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/gguf_output.h"
#include "pipeline/quantize.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_scheme.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
nlohmann::json wide_config() {
  nlohmann::json c = tiny_llama_config(4);
  c["hidden_size"] = 256;
  c["intermediate_size"] = 512;
  c["num_attention_heads"] = 4;
  c["num_key_value_heads"] = 2;
  return c;
}

QuantizeOptions gguf_opts(const std::string& model, const std::string& out, const std::string& preset, int iters) {
  QuantizeOptions o = test::small_quantize_options(model, out, iters);
  o.format = "gguf:" + preset;
  o.overwrite = true;
  return o;
}

// The file's tensors: name -> bytes (the data section starts where the padded tensors end at EOF).
struct GgufBytes {
  GgufFile file;
  std::string data;
  std::map<std::string, std::string> tensors;
  explicit GgufBytes(const std::string& path) : file(GgufFile::open(path)), data(read_text_file(path)) {
    uint64_t end = 0;
    std::vector<std::pair<uint64_t, std::string>> by_offset;
    for (const auto& t : file.tensors) by_offset.emplace_back(t.offset, t.name);
    std::sort(by_offset.begin(), by_offset.end());
    for (const auto& t : file.tensors) {
      uint64_t ne = 1;
      for (uint64_t d : t.dims) ne *= d;
      const uint64_t bytes = uint64_t(quant::ggml_row_bytes(quant::GgmlType(t.type), int64_t(t.dims[0]))) * (ne / t.dims[0]);
      end = std::max(end, (t.offset + bytes + 31) / 32 * 32);
    }
    const uint64_t start = data.size() - end;
    for (const auto& t : file.tensors) {
      uint64_t ne = 1;
      for (uint64_t d : t.dims) ne *= d;
      const uint64_t bytes = uint64_t(quant::ggml_row_bytes(quant::GgmlType(t.type), int64_t(t.dims[0]))) * (ne / t.dims[0]);
      tensors[t.name] = data.substr(start + t.offset, bytes);
    }
  }
  uint32_t type(const std::string& name) const {
    for (const auto& t : file.tensors)
      if (t.name == name) return t.type;
    ADD_FAILURE() << "no tensor " << name;
    return 0;
  }
};

std::string only_gguf(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gguf") return e.path().string();
  ADD_FAILURE() << "no .gguf in " << dir;
  return "";
}
}  // namespace

TEST(GgufPipeline, RoundToNearestWritesThePresetTypesAndTheRtnBytes) {
  const std::string m = test::temp_path("ggp_model"), out = test::temp_path("ggp_out");
  write_synthetic_model(m, wide_config(), 5);
  auto o = gguf_opts(m, out, "q4_k_m", 0);
  o.disable_opt_rtn = true;  // plain round-to-nearest: no calibration data, bytes reproducible here
  quantize_model(o);
  const GgufBytes g(only_gguf(out));
  auto model = HfModel::open(m);
  const ModelConfig& cfg = model->config();
  const quant::GgufScheme scheme = quant::parse_gguf_scheme("gguf:q4_k_m");
  Context ctx(Device{}, 2);
  EXPECT_EQ(g.file.string("general.architecture", ""), "llama");
  EXPECT_EQ(g.file.number("general.file_type", 0), 15);
  int checked = 0;
  for (int64_t b = 0; b < cfg.num_layers; ++b) {
    BlockWeights w = model->load_block(b, ctx);
    for (auto& [nm, t] : quant::block_linears(w)) {
      const std::string hf = HfModel::layer_prefix(b) + nm + ".weight", name = gguf_tensor_name(hf, cfg);
      const std::string kind_name = nm.substr(nm.find('.') + 1);
      const auto kind = kind_name == "v_proj" ? quant::GgufTensorKind::AttnV
                        : kind_name == "down_proj" ? quant::GgufTensorKind::FfnDown
                        : kind_name == "o_proj" ? quant::GgufTensorKind::AttnOutput
                                                : quant::GgufTensorKind::AttnQ;  // the rest: the main type
      const quant::GgmlType type = scheme.type_of(kind, b, cfg.num_layers, t->dim(1), 2);
      EXPECT_EQ(g.type(name), uint32_t(type)) << name;
      std::vector<uint8_t> want = quant::gguf_quantize_rtn(ctx, type, t->f32(), t->dim(0), t->dim(1));
      const std::vector<int64_t> order = gguf_tensor_row_order(hf, cfg);
      if (!order.empty()) {  // llama.cpp's q/k row order
        const size_t rb = want.size() / size_t(t->dim(0));
        std::vector<uint8_t> moved(want.size());
        for (size_t r = 0; r < order.size(); ++r)
          std::copy_n(want.begin() + std::ptrdiff_t(size_t(order[r]) * rb), rb, moved.begin() + std::ptrdiff_t(r * rb));
        want.swap(moved);
      }
      EXPECT_TRUE(g.tensors.at(name) == std::string(want.begin(), want.end())) << name << " bytes differ";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * 7);
  EXPECT_EQ(g.type("output.weight"), uint32_t(quant::GgmlType::Q6_K));
  EXPECT_EQ(g.type("token_embd.weight"), uint32_t(quant::GgmlType::Q4_K));
  EXPECT_EQ(g.type("output_norm.weight"), uint32_t(quant::GgmlType::F32));
  fs::remove_all(m);
  fs::remove_all(out);
}

// The start line's summary of the tensor types (GgufOutput::types_summary) is the file's: every
// tensor of the written file counted under its type, with its role (name without block and
// ".weight"), in the file's order.
TEST(GgufPipeline, TypesSummaryIsTheFilesTypes) {
  const std::string m = test::temp_path("ggt_model"), out = test::temp_path("ggt_out");
  write_synthetic_model(m, wide_config(), 5);
  for (const char* preset : {"q4_k_m", "q2_k_s"}) {
    auto o = gguf_opts(m, out, preset, 0);
    o.disable_opt_rtn = true;
    quantize_model(o);
    const GgufFile file = GgufFile::open(only_gguf(out));
    std::vector<std::pair<uint32_t, std::pair<int, std::vector<std::string>>>> types;
    for (const auto& t : file.tensors) {
      std::string role = t.name.rfind("blk.", 0) == 0 ? t.name.substr(t.name.find('.', 4) + 1) : t.name;
      if (role.ends_with(".weight")) role.resize(role.size() - 7);
      auto it = std::find_if(types.begin(), types.end(), [&](const auto& e) { return e.first == t.type; });
      if (it == types.end()) it = types.insert(types.end(), {t.type, {0, {}}});
      ++it->second.first;
      auto& roles = it->second.second;
      if (std::find(roles.begin(), roles.end(), role) == roles.end()) roles.push_back(role);
    }
    std::string want = std::to_string(file.tensors.size()) + " tensors: ";
    for (size_t i = 0; i < types.size(); ++i) {
      want += std::string(i ? ", " : "") + quant::ggml_type_name(quant::GgmlType(types[i].first)) + " x" +
              std::to_string(types[i].second.first) + " (";
      for (size_t r = 0; r < types[i].second.second.size(); ++r) want += (r ? ", " : "") + types[i].second.second[r];
      want += ")";
    }
    auto model = HfModel::open(m);
    const std::string dir = test::temp_path("ggt_plain");
    fs::create_directories(dir);
    {
      const GgufOutput plain(dir, *model, quant::parse_gguf_scheme(std::string("gguf:") + preset));
      EXPECT_EQ(plain.types_summary(), want) << preset;
    }
    EXPECT_TRUE(fs::is_empty(dir)) << "an unfinished GgufOutput left a file";
    EXPECT_NE(want.find("q6_k x"), std::string::npos) << want;  // both presets raise the output tensor
    fs::remove_all(dir);
  }
  fs::remove_all(m);
  fs::remove_all(out);
}

// --fp_layers and 16-bit --layer_config entries keep their tensors in the stored type (bf16 here), byte
// for byte, as AutoRound writes a 16-bit layer of a GGUF run; the other tensors keep the preset's types.
TEST(GgufPipeline, KeptLinearsAreWrittenInTheirStoredType) {
  const std::string m = test::temp_path("ggp_keep_m"), out = test::temp_path("ggp_keep_o");
  write_synthetic_model(m, wide_config(), 5, DType::BF16);
  auto o = gguf_opts(m, out, "q4_k_m", 0);
  o.disable_opt_rtn = true;
  o.fp_layers = {"layers.0.mlp.down_proj", "lm_head"};
  o.layer_config = LayerConfig::parse("{\"layers.1.self_attn.q_proj\": \"BF16\"}");
  const QuantizeReport rep = quantize_model(o);
  EXPECT_EQ(rep.blocks.size(), 4u);
  const GgufBytes g(only_gguf(out));
  using quant::GgmlType;
  EXPECT_EQ(g.type("blk.0.ffn_down.weight"), uint32_t(GgmlType::BF16));
  EXPECT_EQ(g.type("blk.1.attn_q.weight"), uint32_t(GgmlType::BF16));
  EXPECT_EQ(g.type("output.weight"), uint32_t(GgmlType::BF16));
  EXPECT_EQ(g.type("blk.1.ffn_down.weight"), uint32_t(GgmlType::Q4_K));  // the preset's
  EXPECT_EQ(g.type("blk.2.ffn_down.weight"), uint32_t(GgmlType::Q6_K));  // (use_more_bits)
  EXPECT_EQ(g.type("blk.0.attn_q.weight"), uint32_t(GgmlType::Q4_K));
  auto model = HfModel::open(m);
  for (const auto& [hf, gg] : {std::pair{"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"},
                               std::pair{"lm_head.weight", "output.weight"}}) {
    const uint8_t* bytes = nullptr;
    const StTensorInfo& info = model->raw_info(hf, &bytes);
    EXPECT_TRUE(g.tensors.at(gg) == std::string(reinterpret_cast<const char*>(bytes), info.end - info.begin)) << gg;
  }
  fs::remove_all(m);
  fs::remove_all(out);
}

// q2_k_mixed: AutoRound's --iters 0 recipe (Q4_K blocks, Q8_0 ends, a Q2_K_S file); tuned, it falls back
// to q2_k_s with a note, as AutoRound does for dense models.
TEST(GgufPipeline, Q2KMixedWritesItsRecipeAndFallsBackWhenTuned) {
  const std::string m = test::temp_path("ggm_model"), out = test::temp_path("ggm_out");
  write_synthetic_model(m, wide_config(), 7);
  quantize_model(gguf_opts(m, out, "q2_k_mixed", 0));
  const std::string path = only_gguf(out);
  EXPECT_EQ(fs::path(path).filename().string(), fs::path(m).filename().string() + "-Q2_K_S.gguf");
  {
    const GgufBytes g(path);
    EXPECT_EQ(g.file.number("general.file_type", 0), 21);
    EXPECT_EQ(g.type("token_embd.weight"), uint32_t(quant::GgmlType::Q8_0));
    EXPECT_EQ(g.type("output.weight"), uint32_t(quant::GgmlType::Q8_0));
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
      EXPECT_EQ(g.type(std::string("blk.0.") + t + ".weight"), uint32_t(quant::GgmlType::Q4_K)) << t;
  }
  const QuantizeReport r = quantize_model(gguf_opts(m, out, "q2_k_mixed", 2));
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(),
                          [](const std::string& n) { return n.find("falling back to gguf:q2_k_s") != std::string::npos; }));
  const GgufBytes g(only_gguf(out));
  EXPECT_EQ(g.file.number("general.file_type", 0), 21);
  EXPECT_EQ(g.type("blk.1.ffn_up.weight"), uint32_t(quant::GgmlType::Q2_K));
  EXPECT_EQ(g.type("output.weight"), uint32_t(quant::GgmlType::Q6_K));
  fs::remove_all(m);
  fs::remove_all(out);
}

TEST(GgufPipeline, SignRoundLowersEveryBlockLossAndWritesValidBlocks) {
  const std::string m = test::temp_path("ggt_model"), out = test::temp_path("ggt_out");
  write_synthetic_model(m, wide_config(), 6);
  for (const char* preset : {"q4_k_m", "q2_k_s", "q8_0", "q4_k_s"}) {
    const int iters = std::string(preset) == "q4_k_s" ? 0 : 12;  // q4_k_s: the imatrix search alone
    const QuantizeReport r = quantize_model(gguf_opts(m, out, preset, iters));
    ASSERT_EQ(r.blocks.size(), 4u);
    for (const auto& b : r.blocks) {
      if (iters) {
        EXPECT_LT(b.loss_best, b.loss_first) << preset << " block " << b.index;
      }
    }
    const GgufBytes g(only_gguf(out));
    for (const auto& t : g.file.tensors) {  // every block decodes to finite values
      const std::string& bytes = g.tensors.at(t.name);
      uint64_t ne = 1;
      for (uint64_t d : t.dims) ne *= d;
      std::vector<float> v(ne);
      quant::ggml_dequantize(quant::GgmlType(t.type), reinterpret_cast<const uint8_t*>(bytes.data()), v.data(), int64_t(ne));
      for (float x : v) ASSERT_TRUE(std::isfinite(x)) << preset << " " << t.name;
    }
  }
  fs::remove_all(m);
  fs::remove_all(out);
}

// gguf:<preset>,fake (the one companion AutoRound allows a GGUF format): the fake model holds the GGUF
// file's tensors dequantized (fp16), so transformers-side evaluation sees exactly what llama.cpp runs:
// every tensor of both, loaded through the loader (the GGUF dequantized on load, Q/K rows restored),
// agrees to fp16 rounding; the tuned Linears' codes are in the file.
TEST(GgufPipeline, FakeCompanionHoldsTheFileDequantized) {
  const std::string m = test::temp_path("ggf_model"), out = test::temp_path("ggf_out");
  write_synthetic_model(m, wide_config(), 8);
  for (int iters : {-1, 0, 2}) {  // -1: plain round-to-nearest (no calibration data), 0: the search
    auto o = gguf_opts(m, out, "q4_k_m", std::max(iters, 0));
    o.disable_opt_rtn = iters < 0;
    o.format = "gguf:q4_k_m,fake";
    quantize_model(o);
    const std::string file = only_gguf(out + "/gguf-q4-k-m");
    ASSERT_TRUE(fs::exists(out + "/fake/config.json"));
    auto g = open_model(file), f = HfModel::open(out + "/fake");
    const nlohmann::json q = nlohmann::json::parse(read_text_file(out + "/fake/quantization_config.json"));
    EXPECT_EQ(q.value("data_type", ""), "gguf:q4_k_m");
    EXPECT_FALSE(q.contains("bits"));
    Context ctx(Device{}, 2);
    auto same = [&](const std::string& name, const Tensor& a, const Tensor& b) {
      ASSERT_EQ(a.numel(), b.numel()) << name;
      const bool half = f->info(name)->dtype == DType::F16;  // computed tensors; the norms are copied
      for (int64_t i = 0; i < a.numel(); ++i) {
        const float want = half ? f16_to_f32(f32_to_f16(a.f32()[i])) : a.f32()[i];
        ASSERT_EQ(want, b.f32()[i]) << name << " [" << i << "] iters " << iters;
      }
    };
    const ModelConfig& cfg = g->config();
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const BlockWeights a = g->load_block(l, ctx), b = f->load_block(l, ctx);
      const Tensor* ta[] = {&a.ln1, &a.wq, &a.wk, &a.wv, &a.wo, &a.ln2, &a.wg, &a.wu, &a.wd};
      const Tensor* tb[] = {&b.ln1, &b.wq, &b.wk, &b.wv, &b.wo, &b.ln2, &b.wg, &b.wu, &b.wd};
      const char* names[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                             "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                             "mlp.down_proj"};
      for (size_t k = 0; k < std::size(ta); ++k) same(HfModel::layer_prefix(l) + names[k] + ".weight", *ta[k], *tb[k]);
    }
    same("model.embed_tokens.weight", g->load_embeddings(ctx), f->load_embeddings(ctx));
    same("lm_head.weight", g->load_lm_head(ctx), f->load_lm_head(ctx));
    same("model.norm.weight", g->load_final_norm(ctx), f->load_final_norm(ctx));
  }
  fs::remove_all(m);
  fs::remove_all(out);
}

// --format auto_round,gguf:q4_k_m: one run, two tunings per block (the int scheme's and the GGUF
// types'), each on its own quantized-input chain from one load, calibration and FP pass. Each output
// is byte for byte the one its format alone writes; fake goes with the int formats. Each track gets
// the statistics it asks for: an asymmetric int scheme (plain RTN at --iters 0) beside the GGUF search
// (imatrix-weighted) is not handed the imatrix (before the scheme tracks it was, and its symmetric
// search overflowed the asymmetric codes: "code out of range").
TEST(GgufPipeline, IntAndGgufFormatsFromOneRunEqualSeparateRuns) {
  const std::string m = test::temp_path("ggi_model"), out = test::temp_path("ggi_out");
  write_synthetic_model(m, wide_config(), 9);
  for (auto [iters, sym] : {std::pair{0, true}, {0, false}, {3, true}}) {
    SCOPED_TRACE("iters " + std::to_string(iters) + (sym ? " sym" : " asym"));
    auto o = gguf_opts(m, out + "/int", "q4_k_m", iters);
    o.fmt.sym = sym;
    o.format = "auto_round,fake";
    quantize_model(o);
    o.output_dir = out + "/gguf";
    o.format = "gguf:q4_k_m";
    quantize_model(o);
    o.output_dir = out + "/both";
    o.format = "auto_round,gguf:q4_k_m,fake";
    const QuantizeReport r = quantize_model(o);
    for (const char* f : {"auto-round/model.safetensors", "fake/model.safetensors", "auto-round/config.json"})
      EXPECT_EQ(read_text_file(out + "/both/" + f), read_text_file(out + "/int/" + f)) << f;
    const std::string g = only_gguf(out + "/gguf");
    EXPECT_EQ(read_text_file(only_gguf(out + "/both/gguf-q4-k-m")), read_text_file(g));
    ASSERT_EQ(r.blocks.size(), 4u);
    for (const auto& b : r.blocks) {
      ASSERT_TRUE(b.gguf.has_value());
      if (iters) {  // the GGUF tuning ran: its loss is reported (the best never above the first)
        EXPECT_GE(b.gguf->best_iter, 0);
        EXPECT_LE(b.gguf->loss_best, b.gguf->loss_first);
        EXPECT_GT(b.gguf->loss_first, 0);
      }
      EXPECT_TRUE(b.phase_seconds.count("gguf_tune"));
    }
    fs::remove_all(out);
  }
  fs::remove_all(m);
}

TEST(GgufPipeline, UnsupportedCombinationsAreRefusedBeforeWriting) {
  const std::string m = test::temp_path("ggr_model"), out = test::temp_path("ggr_out");
  write_synthetic_model(m, wide_config(), 7);
  auto o = gguf_opts(m, out, "q4_k_m", 0);
  o.format = "gguf:q4_k_m,auto_round,gguf:q2_k_s";
  EXPECT_THROW(quantize_model(o), Error);
  o.format = "gguf:q4_k_m";
  o.resume = true;
  EXPECT_THROW(quantize_model(o), Error);
  o.resume = false;
  o.format = "gguf:q4_k_x";
  EXPECT_THROW(quantize_model(o), Error);
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(m);
}
