// FP8_STATIC (W8A8: FP8 weights per channel and one static E4M3 scale per Linear input): the
// activation maxima of the calibration tokens, written as input_scale, against AutoRound 0.16.1's own
// RTN outputs of the same model and calibration (tests/data/fp8_static, made by
// tools/make_fp8_static_goldens.py); the maxima are the same for every lane world; SignRound runs and
// writes scales from the quantized chain's maxima; a killed --resume run ends byte-identical;
// lm_head gets its input's scale; eval computes W8A8 with the stored scales and refuses bad ones.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "block_fixture.h"
#include "fp_schemes.h"
#include "resume_check.h"
#include "core/dtype.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/rope_table.h"
#include "model/synthetic.h"
#include "model/tokenizer/tokenizer.h"
#include "model/transformer.h"
#include "quant/calib.h"
#include "pipeline/quantize.h"

using namespace ar;
using namespace ar::quant;
using test::fp_format;

namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(AR_SOURCE_DIR) + "/tests/data/fp8_static/";

QuantizeOptions static_opts(const std::string& model, const std::string& out, const std::string& format, int iters) {
  QuantizeOptions o;
  o.model_dir = model;
  o.output_dir = out;
  o.fmt = test::fp8_static_format();
  o.format = format;
  o.tune.iters = iters;
  o.disable_opt_rtn = true;
  o.calib.nsamples = 4;
  o.calib.seqlen = 32;
  o.threads = 2;
  o.amp = false;  // the goldens' FP chain ran in fp32 (AutoRound's on the CPU); amp's bf16 GEMMs move maxima by ~2^-9
  return o;
}

// A golden source model (default: the dense one) with the tokenizer the calibration documents are read
// with.
std::string golden_model(const std::string& data = kData) {
  const std::string m = test::temp_path("fp8s_source");
  fs::create_directories(m);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(data + "source/" + f, m + "/" + f);
  for (const auto& e : fs::directory_iterator(std::string(AR_SOURCE_DIR) + "/tests/data/autoround_golden/tokenizer"))
    fs::copy_file(e.path(), m + "/" + e.path().filename().string());
  return m;
}

float f32_at(const SafetensorsFile& f, const std::string& name) {
  const StTensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return NAN;
  EXPECT_EQ(t->dtype, DType::F32) << name;
  float v;
  std::memcpy(&v, f.bytes(*t), sizeof v);
  return v;
}

std::map<std::string, float> input_scales(const SafetensorsFile& f) {
  std::map<std::string, float> m;
  for (const auto& t : f.header().tensors)
    if (t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, ".input_scale") == 0) m[t.name] = f32_at(f, t.name);
  return m;
}

nlohmann::json quant_config(const std::string& dir) {
  return nlohmann::json::parse(read_text_file(dir + "/config.json"))["quantization_config"];
}

// Our two outputs in q against AutoRound's in `data`: every weight and weight_scale byte-identical;
// every input_scale within 1e-5 relative (GEMM kernels differ in summation order) and bit-identical
// where no GEMM precedes the input (block 0's q/k/v read the embeddings' RMSNorm). Returns how many
// input scales were bit-identical; `scales` is how many each output holds.
int expect_autoround_outputs(const std::string& q, const std::string& data, size_t scales) {
  int exact = 0;
  for (const auto& [ours_dir, theirs_dir] : {std::pair{"/llm-compressor", "llm_compressor"}, {"/auto-round", "auto_round"}}) {
    auto theirs = SafetensorsFile::open(data + theirs_dir + "/model.safetensors");
    auto ours = SafetensorsFile::open(q + ours_dir + "/model.safetensors");
    const auto their_in = input_scales(*theirs), our_in = input_scales(*ours);
    EXPECT_EQ(our_in.size(), their_in.size()) << theirs_dir;
    EXPECT_EQ(our_in.size(), scales) << theirs_dir;
    for (const auto& [name, v] : their_in) {
      if (!our_in.count(name)) {
        ADD_FAILURE() << theirs_dir << ": we write no " << name;
        continue;
      }
      const float u = our_in.at(name);
      EXPECT_LE(std::fabs(u - v), 1e-5f * v) << theirs_dir << " " << name;
      // Inputs that are the first norm's output (q/k/v; MLA's q_a and kv_a), no GEMM before them.
      const bool first_norm = name.rfind("model.layers.0.self_attn.", 0) == 0 &&
                              (name.find("o_proj") == std::string::npos && name.find("_b_proj") == std::string::npos);
      if (first_norm) {
        EXPECT_EQ(u, v) << theirs_dir << " " << name;
      }
      exact += u == v;
    }
    size_t compared = 0;
    for (const auto& t : theirs->header().tensors) {
      if (t.name.find(".input_scale") != std::string::npos) continue;
      const StTensorInfo* u = ours->find(t.name);
      if (!u) {
        ADD_FAILURE() << theirs_dir << ": we do not write " << t.name;
        continue;
      }
      EXPECT_EQ(dtype_name(u->dtype), std::string(dtype_name(t.dtype))) << t.name;
      EXPECT_EQ(u->shape, t.shape) << theirs_dir << " " << t.name;
      if (u->end - u->begin != t.end - t.begin) continue;
      EXPECT_EQ(0, std::memcmp(ours->bytes(*u), theirs->bytes(t), size_t(t.end - t.begin))) << theirs_dir << " " << t.name;
      ++compared;
    }
    EXPECT_EQ(compared, 2 * scales) << theirs_dir << ": weight and weight_scale of every Linear";
  }
  const nlohmann::json a = quant_config(data + "llm_compressor"), b = quant_config(q + "/llm-compressor");
  EXPECT_EQ(a["format"], b["format"]);
  EXPECT_EQ(a["config_groups"]["group_0"]["weights"], b["config_groups"]["group_0"]["weights"]);
  EXPECT_EQ(a["config_groups"]["group_0"]["input_activations"], b["config_groups"]["group_0"]["input_activations"]);
  const nlohmann::json c = quant_config(data + "auto_round"), d = quant_config(q + "/auto-round");
  for (const char* k : {"packing_format", "bits", "group_size", "data_type", "act_bits", "act_data_type", "act_dynamic",
                        "act_group_size", "act_sym", "activation_scheme", "fmt"})
    EXPECT_EQ(c[k], d[k]) << k;
  return exact;
}

}  // namespace

// Same model, same calibration documents: the outputs as AutoRound's (measured: 12 of 28 input scales
// identical and the others 1-2 fp32 ulps apart on AVX-512's kernels, up to 7 ulps under the AVX2 cap);
// and the configs' quantization args equal.
TEST(PipelineFp8Static, RtnMatchesAutoRound) {
  const std::string m = golden_model(), q = test::temp_path("fp8s_rtn");
  QuantizeOptions o = static_opts(m, q, "llm_compressor,auto_round", 0);
  o.calib.dataset = kData + "calib.jsonl";
  quantize_model(o);
  EXPECT_GE(expect_autoround_outputs(q, kData, 14), 6) << "input scales equal to AutoRound's bit for bit";
  for (const auto& dir : {m, q}) fs::remove_all(dir);
}

// A Qwen3-MoE (layer 0 dense, layer 1 with 8 experts, top-2) whose rank-one router sends every token to
// experts {0, 1} or {6, 7} (tests/data/fp8_static_moe, tools/make_fp8_static_moe_goldens.py): each
// expert's input scale is the maximum over the tokens routed to it, experts 2-5 get AutoRound's fill
// (per projection, the largest scale of the calibrated experts), every expert's weights are
// AutoRound's bytes, and the router stays bf16 with AutoRound's extra_config entry and compressed-
// tensors' ignore. Measured: 11 of 35 input scales bit-identical, the rest 1-2 ulps apart.
TEST(PipelineFp8Static, MoeRtnMatchesAutoRound) {
  const std::string data = std::string(AR_SOURCE_DIR) + "/tests/data/fp8_static_moe/";
  const std::string m = golden_model(data), q = test::temp_path("fp8s_moe_rtn");
  QuantizeOptions o = static_opts(m, q, "llm_compressor,auto_round", 0);
  o.calib.dataset = kData + "calib.jsonl";
  const QuantizeReport rep = quantize_model(o);
  ASSERT_EQ(rep.blocks.size(), 2u);
  EXPECT_EQ(rep.blocks[1].expert_tokens, (std::vector<int64_t>{78, 78, 0, 0, 0, 0, 50, 50}))
      << "the rank-one router's split of the 4 x 32 tokens";
  EXPECT_GE(expect_autoround_outputs(q, data, 7 + 4 + 8 * 3), 6) << "input scales equal to AutoRound's bit for bit";
  const std::string router = "model.layers.1.mlp.gate";
  EXPECT_EQ(quant_config(q + "/auto-round")["extra_config"][router],
            quant_config(data + "auto_round")["extra_config"][router]);
  const nlohmann::json ignore = quant_config(q + "/llm-compressor")["ignore"];
  EXPECT_NE(std::find(ignore.begin(), ignore.end(), router), ignore.end()) << ignore.dump();
  auto src = SafetensorsFile::open(m + "/model.safetensors");
  for (const char* dir : {"/auto-round", "/llm-compressor"}) {
    auto ours = SafetensorsFile::open(q + dir + "/model.safetensors");
    const StTensorInfo *a = src->find(router + ".weight"), *b = ours->find(router + ".weight");
    ASSERT_TRUE(a && b) << dir;
    ASSERT_EQ(a->end - a->begin, b->end - b->begin);
    EXPECT_EQ(0, std::memcmp(src->bytes(*a), ours->bytes(*b), size_t(a->end - a->begin))) << dir << ": the router's bf16 bytes";
  }
  for (const auto& dir : {m, q}) fs::remove_all(dir);
}

// DeepSeek-V3's latent attention (tests/data/fp8_static_mla, tools/make_fp8_static_mla_goldens.py):
// each of MLA's five Linears gets its own input's scale (q_a_proj and kv_a_proj_with_mqa the attention
// norm's output, q_b_proj the q_a layernorm's, kv_b_proj the latent's, o_proj the attention output's),
// with AutoRound's weights and scales; SignRound on it reads the same first-block inputs.
TEST(PipelineFp8Static, MlaRtnMatchesAutoRound) {
  const std::string data = std::string(AR_SOURCE_DIR) + "/tests/data/fp8_static_mla/";
  const std::string m = golden_model(data), q = test::temp_path("fp8s_mla_rtn"), t = test::temp_path("fp8s_mla_sr");
  QuantizeOptions o = static_opts(m, q, "llm_compressor,auto_round", 0);
  o.calib.dataset = kData + "calib.jsonl";
  quantize_model(o);
  EXPECT_GE(expect_autoround_outputs(q, data, 2 * 5 + 3 + 3 * (4 + 1)), 4)
      << "layer 0's q_a_proj and kv_a_proj_with_mqa read the norm: bit-identical in both formats";
  // AutoRound names the router by a pattern (its predefined ignore_layers), we by its name: both 16 bit.
  const nlohmann::json ours = quant_config(q + "/auto-round")["extra_config"]["model.layers.1.mlp.gate"];
  const nlohmann::json theirs = quant_config(data + "auto_round")["extra_config"][".*model\\.layers\\.1\\.mlp\\.gate.*"];
  for (const char* k : {"bits", "data_type", "act_bits"}) EXPECT_EQ(ours[k], theirs[k]) << k << ": " << theirs.dump();
  o.output_dir = t;
  o.format = "auto_round";
  o.tune.iters = 2;
  quantize_model(o);
  auto rtn = SafetensorsFile::open(q + "/auto-round/model.safetensors"), sr = SafetensorsFile::open(t + "/model.safetensors");
  for (const char* l : {"q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj", "o_proj"}) {
    const std::string name = std::string("model.layers.0.self_attn.") + l + ".input_scale";
    EXPECT_EQ(f32_at(*sr, name), f32_at(*rtn, name)) << name << ": block 0 reads the FP chain either way";
  }
  for (const auto& dir : {m, q, t}) fs::remove_all(dir);
}

// The maxima are folded by max over the lane, so the in-process lane (2 CPU devices) writes the serial
// bytes, RTN and SignRound alike; SignRound's scales come from the quantized chain (AutoRound's rule),
// so they differ from RTN's after the first block and equal them in it.
TEST(PipelineFp8Static, LaneWorldsWriteTheSerialBytesAndTuningReadsTheQuantizedChain) {
  const std::string m = test::temp_path("fp8s_lane_model");
  auto cfg = tiny_llama_config(3);
  write_synthetic_model(m, cfg, 21);
  std::map<int, std::string> serial;
  for (int iters : {0, 4}) {
    for (bool lane : {false, true}) {
      const std::string q = test::temp_path("fp8s_lane_" + std::to_string(iters) + (lane ? "_w2" : "_w1"));
      QuantizeOptions o = static_opts(m, q, "llm_compressor", iters);
      o.calib.nsamples = 8;
      o.calib.seqlen = 64;
      if (lane) {
        o.devices = "cpu:0,cpu:1";
        o.parallel = parallel::ParallelSetting::parse("2");
      }
      const QuantizeReport rep = quantize_model(o);
      EXPECT_EQ(rep.blocks[0].world_collect, lane ? 2 : 1) << "the statistics ran on the lane";
      const std::string bytes = read_text_file(q + "/model.safetensors");
      if (!lane) serial[iters] = bytes;
      else EXPECT_EQ(bytes, serial[iters]) << "iters " << iters << ": world 2 differs from serial";
      fs::remove_all(q);
    }
  }
  // Block 0 reads the same input in both runs; later blocks read the tuned chain in SignRound.
  const std::string a = test::temp_path("fp8s_cmp_rtn"), b = test::temp_path("fp8s_cmp_sr");
  write_file_atomic(a, serial[0]);
  write_file_atomic(b, serial[4]);
  auto rtn = SafetensorsFile::open(a), sr = SafetensorsFile::open(b);
  const auto r = input_scales(*rtn), s = input_scales(*sr);
  ASSERT_EQ(r.size(), 21u);
  int later_differ = 0;
  for (const auto& [name, v] : r) {
    EXPECT_GT(v, 0.f) << name;
    if (name.rfind("model.layers.0.", 0) == 0 && name.find("q_proj") != std::string::npos) {
      EXPECT_EQ(v, s.at(name)) << name << ": block 0's first input is the embeddings in both";
    }
    if (name.rfind("model.layers.0.", 0) != 0) later_differ += v != s.at(name);
  }
  EXPECT_GT(later_differ, 0) << "SignRound's later blocks read the quantized chain";
  for (const auto& p : {a, b, m}) fs::remove_all(p);
}

// --resume: the resume state holds the written input_scale tensors (accepted as a Linear's packing)
// and the quantized chain the next block's maxima are read from; the resumed output is byte-identical
// to an uninterrupted run.
TEST(PipelineFp8Static, ResumeAfterSigkillIsByteIdentical) {
  const std::string m = test::temp_path("fp8s_resume_model"), ref = test::temp_path("fp8s_resume_ref"),
                    q = test::temp_path("fp8s_resume_q");
  auto cfg = tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  write_synthetic_model(m, cfg, 23);
  QuantizeOptions o = static_opts(m, ref, "llm_compressor,auto_round", 30);
  o.calib.nsamples = 8;
  o.calib.seqlen = 64;
  test::expect_resume_matches_uninterrupted(o, q, 4, {"/llm-compressor", "/auto-round"});
  for (const auto& d : {m, ref, q}) fs::remove_all(d);
}

// --quant_lm_head: lm_head is packed with its own input scale. RTN reads the FP chain, so lm_head's
// input is the FP model's final-norm output, which the inference forward (model/transformer.h)
// computes on its own: input_scale = its maximum over the calibration tokens / 448.
TEST(PipelineFp8Static, QuantLmHeadWritesItsInputMaximum) {
  const std::string m = test::temp_path("fp8s_lm_model"), q = test::temp_path("fp8s_lm_out");
  auto cfg = tiny_llama_config(1);
  cfg["vocab_size"] = 320;
  write_synthetic_model(m, cfg, 25);
  QuantizeOptions o = static_opts(m, q, "llm_compressor", 0);
  o.quant_lm_head = true;
  ASSERT_TRUE(quantize_model(o).lm_head_quantized);
  auto out = SafetensorsFile::open(q + "/model.safetensors");
  const float ours = f32_at(*out, "lm_head.input_scale");
  EXPECT_EQ(quant_config(q)["ignore"], nlohmann::json::array());

  auto model = HfModel::open(m);
  auto tok = load_tokenizer(m);
  quant::CalibOptions co = o.calib;
  co.max_context = model->config().max_position_embeddings;
  const quant::CalibData cd = quant::build_calibration(*tok, co);
  Context ctx(Device{}, 2);
  Transformer tf(*model, ctx, false);
  const Tensor h = tf.forward_hidden(cd.ids.data(), nullptr, cd.n, cd.seqlen);
  float amax = 0;
  for (int64_t i = 0; i < h.numel(); ++i) amax = std::max(amax, std::fabs(h.f32()[i]));
  EXPECT_NEAR(ours, amax / 448.0f, 1e-5f * amax / 448.0f);
  for (const auto& d : {m, q}) fs::remove_all(d);
}

namespace {

// The logits of `dir` computed block by block with the CPU block runner, each Linear's input through the
// activation QDQ at the input_scale read here straight from the file (slot order q, k, v, o, gate, up,
// down), and lm_head's dense GEMM: what Transformer must compute for a W8A8 checkpoint.
std::vector<float> composed_logits(const std::string& dir, const std::vector<int32_t>& ids, bool with_act) {
  auto model = HfModel::open(dir);
  auto file = SafetensorsFile::open(dir + "/model.safetensors");
  const ModelConfig& c = model->config();
  Context ctx(Device{}, 2);
  const int64_t T = int64_t(ids.size()), C = c.hidden_size;
  Tensor x = Tensor::empty({T, C}, DType::F32, ctx), y = Tensor::empty({T, C}, DType::F32, ctx);
  const Tensor E = model->load_embeddings(ctx);
  for (int64_t t = 0; t < T; ++t) std::memcpy(x.f32() + t * C, E.f32() + ids[size_t(t)] * C, size_t(C) * 4);
  const RopeTable rope = make_rope_table(c, c.max_position_embeddings);
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
  BlockAux<float> aux{1, T, pos.data(), rope.cos.data(), rope.sin.data(), nullptr};
  cpu::CpuOps ops{ctx};
  BlockRunner<cpu::CpuOps> run(ops, c.block_dims(0));
  const char* slots[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ActQdq<float> act;
    act.s.resize(7);
    for (int k = 0; k < 7; ++k) act.s[k] = f32_at(*file, HfModel::layer_prefix(l) + slots[k] + ".input_scale");
    BlockRunner<cpu::CpuOps>::Cache cache;
    run.forward(model->load_block(l, ctx).ptrs(), aux, x.f32(), y.f32(), cache, nullptr, with_act ? &act : nullptr);
    std::swap(x, y);
  }
  cpu::rmsnorm_fwd(ctx, x.f32(), model->load_final_norm(ctx).f32(), y.f32(), nullptr, T, C, c.rms_norm_eps);
  std::vector<float> logits(size_t(T * c.vocab_size));
  cpu::linear_fwd(ctx, y.f32(), model->load_lm_head(ctx).f32(), nullptr, logits.data(), T, C, c.vocab_size);
  return logits;
}

// Overwrites the 4 bytes of tensor `name` in a single-file checkpoint (a tampered input_scale).
void poke_f32(const std::string& path, const std::string& name, float v) {
  std::string bytes = read_text_file(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  auto f = SafetensorsFile::open(path);
  const StTensorInfo* t = f->find(name);
  ASSERT_NE(t, nullptr) << name;
  std::memcpy(bytes.data() + 8 + hlen + t->begin, &v, 4);
  f.reset();
  write_file_atomic(path, bytes);
}

}  // namespace

// eval reads a W8A8 checkpoint as one: in both formats the config says static FP8 activations, and the
// inference forward (model/transformer.h) gives the bits of the block-by-block composition with the
// file's input scales in their slots, which are not the weight-only logits. A tampered scale (NaN,
// negative) or a missing one is refused naming the tensor.
TEST(PipelineFp8Static, EvalQuantizesTheActivationsWithTheStoredScales) {
  const std::string m = test::temp_path("fp8s_eval_model"), q = test::temp_path("fp8s_eval_out");
  auto cfg = tiny_llama_config(2);
  write_synthetic_model(m, cfg, 27);
  QuantizeOptions o = static_opts(m, q, "llm_compressor,auto_round", 3);
  quantize_model(o);
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(int32_t((i * 37 + 5) % cfg["vocab_size"].get<int>()));
  for (const std::string& dir : {q + "/llm-compressor", q + "/auto-round"}) {
    SCOPED_TRACE(dir);
    auto model = HfModel::open(dir);
    ASSERT_TRUE(model->config().quant.act_static);
    Context ctx(Device{}, 2);
    Transformer tf(*model, ctx, false);
    const Tensor z = tf.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
    const std::vector<float> want = composed_logits(dir, ids, true), w_only = composed_logits(dir, ids, false);
    ASSERT_EQ(size_t(z.numel()), want.size());
    EXPECT_EQ(0, std::memcmp(z.f32(), want.data(), want.size() * 4)) << "eval is not the W8A8 composition";
    EXPECT_NE(want, w_only);
    Transformer gen(*model, ctx, true);  // generate's incremental path agrees on the last position
    const std::vector<float> last = gen.decode(ids.data(), int64_t(ids.size()));
    const int64_t V = cfg["vocab_size"].get<int>();
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(last[size_t(v)], z.f32()[(int64_t(ids.size()) - 1) * V + v], 1e-4f) << v;
  }
  const std::string file = q + "/llm-compressor/model.safetensors", name = "model.layers.1.mlp.up_proj.input_scale";
  const std::string good = read_text_file(file);
  for (float bad : {-1.0f, NAN}) {
    poke_f32(file, name, bad);
    auto model = HfModel::open(q + "/llm-compressor");
    Context ctx(Device{}, 1);
    try {
      Transformer tf(*model, ctx, false);
      ADD_FAILURE() << "a scale of " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    write_file_atomic(file, good);
  }
  // The same bytes under another name: the Linear's scale is missing.
  std::string renamed = good;
  const size_t at = renamed.find(name);
  ASSERT_NE(at, std::string::npos);
  renamed[at + name.size() - 1] = 'f';  // ".input_scalf"
  write_file_atomic(file, renamed);
  try {
    auto model = HfModel::open(q + "/llm-compressor");
    Context ctx(Device{}, 1);
    Transformer tf(*model, ctx, false);
    ADD_FAILURE() << "a missing input_scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  for (const auto& d : {m, q}) fs::remove_all(d);
}
