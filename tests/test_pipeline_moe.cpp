// Mixture-of-experts models through the quantize pipeline (docs/moe.md): each architecture quantized
// and read back (every expert packed under its per-expert name, routers in 16 bit and listed in
// extra_config, token counts per expert in the report), a fused-layout checkpoint writes the per-expert
// output of its per-expert twin, experts that receive no calibration token are counted and keep their
// initial rounding, the per-expert statistics cover every routed token, deterministic worlds write the
// serial bytes (also under --amp), and FP8_STATIC writes every expert's input scale.
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hf_checkpoint.h"
#include "core/dtype.h"
#include "io/gguf.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "io/mapped_file.h"
#include "model/gguf_source.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/linear_specs.h"
#include "model/dequant_float.h"
#include "model/moe_names.h"
#include "model/rope_table.h"
#include "model/synthetic.h"
#include "pipeline/block_passes.h"
#include "quant/ggml_types.h"
#include "pipeline/quantize.h"
#include "pipeline/run_summary.h"
#include "quant/qdq.h"
#include "fp_schemes.h"
#include "quantize_options.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
const char* const kArchs[] = {"qwen3_moe", "qwen2_moe", "mixtral"};

// The model rewritten in transformers 5's fused expert layout (gate rows, then up rows, per expert).
void write_fused_twin(const std::string& src, const std::string& dst) {
  fs::create_directories(dst);
  for (const char* f : {"config.json", "tokenizer.bin"}) fs::copy_file(src + "/" + f, dst + "/" + f);
  const ModelConfig c = load_model_config(src + "/config.json");
  auto in = SafetensorsFile::open(src + "/model.safetensors");
  Context ctx(Device{}, 1);
  std::vector<StEntry> out;
  std::set<std::string> expert_names;
  const int64_t E = c.moe.num_experts, I = c.moe.expert_intermediate, C = c.hidden_size;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    Tensor gu = Tensor::empty({E, 2 * I, C}, DType::BF16, ctx), dn = Tensor::empty({E, C, I}, DType::BF16, ctx);
    for (int64_t e = 0; e < E; ++e) {
      const ExpertProj parts[3] = {ExpertProj::Gate, ExpertProj::Up, ExpertProj::Down};
      uint16_t* dst_at[3] = {gu.data<uint16_t>() + e * 2 * I * C, gu.data<uint16_t>() + (e * 2 + 1) * I * C,
                             dn.data<uint16_t>() + e * C * I};
      for (int j = 0; j < 3; ++j) {
        const std::string n = expert_weight_name(c, l, e, parts[j]);
        const StTensorInfo* t = in->find(n);
        std::memcpy(dst_at[j], in->bytes(*t), t->end - t->begin);
        expert_names.insert(n);
      }
    }
    out.push_back({fused_experts_name(l, ExpertProj::Gate), gu});
    out.push_back({fused_experts_name(l, ExpertProj::Down), dn});
  }
  test::append_stored_except(*in, expert_names, out, ctx);
  write_safetensors(dst + "/model.safetensors", out);
}

// Rewrites layer `layer`'s router to rank one: expert e's logit is a[e] * (u . h), so whichever the sign
// of u . h, the top-2 are experts {0, 1} or {6, 7}, and experts 2..5 never receive a token.
void make_router_skip_middle_experts(const std::string& dir, int64_t layer) {
  const ModelConfig c = load_model_config(dir + "/config.json");
  auto in = SafetensorsFile::open(dir + "/model.safetensors");
  Context ctx(Device{}, 1);
  std::vector<StEntry> out;
  const std::string router = router_weight_name(c, layer, false);
  for (const auto& t : in->header().tensors) {
    Tensor copy = Tensor::empty(t.shape, t.dtype, ctx);
    std::memcpy(copy.raw(), in->bytes(t), t.end - t.begin);
    if (t.name == router) {
      const float a[8] = {-4, -3, -0.5f, -0.25f, 0.25f, 0.5f, 3, 4};
      Tensor f = Tensor::empty(t.shape, DType::F32, ctx);
      for (int64_t e = 0; e < t.shape[0]; ++e)
        for (int64_t i = 0; i < t.shape[1]; ++i) f.f32()[e * t.shape[1] + i] = a[e] * (i % 3 == 0 ? 1.f : -0.5f);
      copy = f.to(t.dtype, ctx);
    }
    out.push_back({t.name, copy});
  }
  write_safetensors(dir + "/model.safetensors", out);
}

json quant_config(const std::string& dir) {
  return json::parse(read_text_file(dir + "/config.json")).value("quantization_config", json());
}
}  // namespace

// Plain RTN of each architecture: every expert (and the shared expert) packed under its per-expert
// name (Mixtral's as block_sparse_moe.experts.E.gate_proj, as AutoRound writes it) and read back to
// exactly the QDQ of the FP weights; an expert kept by --fp_layers copied as stored; routers and the
// shared expert gate copied bit for bit and listed in extra_config as 16 bit; the report counts each
// layer's routed tokens.
TEST(PipelineMoe, EachArchitectureQuantizesAndReadsBackExactly) {
  for (const char* arch : kArchs) {
    const std::string m = test::temp_path(std::string("pmoe_m_") + arch), root = test::temp_path(std::string("pmoe_q_") + arch);
    std::string q = root;
    write_synthetic_model(m, tiny_moe_config(arch), 41, DType::BF16);
    auto o = test::moe_quantize_options(m, q, 0);
    o.disable_opt_rtn = true;
    o.fp_layers = {"experts.7."};  // kept: written as stored (Mixtral's w1 under its gate_proj name)
    o.format = "auto_round,fake";
    const QuantizeReport rep = quantize_model(o);
    // The fake model (plain weights) keeps the spelling transformers' own loader reads: Mixtral's w1.
    const auto fake = test::tensor_bytes(q + "/fake/model.safetensors");
    const std::string fake_expert = std::string(arch) == "mixtral" ? "model.layers.0.block_sparse_moe.experts.0.w1.weight"
                                                                   : "model.layers.1.mlp.experts.0.gate_proj.weight";
    EXPECT_TRUE(fake.count(fake_expert)) << arch << ": " << fake_expert;
    q += "/auto-round";
    auto src = HfModel::open(m), dst = HfModel::open(q);
    const ModelConfig& c = src->config();
    const json qc = quant_config(q);
    Context ctx(Device{}, 2);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string pre = HfModel::layer_prefix(l);
      BlockWeights a = src->load_block(l, ctx), b = dst->load_block(l, ctx);
      const auto la = quant::block_linears(a), lb = quant::block_linears(b);
      ASSERT_EQ(la.size(), lb.size()) << arch << " layer " << l;
      const auto sb = test::tensor_bytes(m + "/model.safetensors"), qb = test::tensor_bytes(q + "/model.safetensors");
      for (size_t k = 0; k < la.size(); ++k) {
        const Tensor& wa = *la[k].second;
        if (la[k].first.find("experts.7.") != std::string::npos) {
          const int j = int(k - 4) % 3;
          const std::string stored = expert_weight_name(c, l, 7, j == 0 ? ExpertProj::Gate : j == 1 ? ExpertProj::Up : ExpertProj::Down);
          EXPECT_TRUE(qb.count(pre + la[k].first + ".weight") && qb.at(pre + la[k].first + ".weight") == sb.at(stored))
              << arch << ": " << stored << " kept as " << pre + la[k].first;
          continue;
        }
        ASSERT_TRUE(dst->has(pre + la[k].first + ".qweight")) << arch << ": " << pre + la[k].first;
        auto sh = quant::make_qdq_shape(wa.dim(0), wa.dim(1), 4, 32, true);
        std::vector<float> lo(size_t(sh.out * sh.groups())), hi(lo.size()), ref(size_t(wa.numel()));
        quant::qdq_minmax(ctx, sh, wa.f32(), lo.data(), hi.data());
        quant::qdq_fwd(ctx, sh, wa.f32(), nullptr, nullptr, nullptr, lo.data(), hi.data(), ref.data(), nullptr, nullptr);
        for (int64_t i = 0; i < wa.numel(); ++i)
          ASSERT_EQ(lb[k].second->f32()[i], ref[size_t(i)]) << arch << " " << pre << la[k].first << " i " << i;
      }
      if (!c.is_moe_layer(l)) {
        EXPECT_TRUE(rep.blocks[size_t(l)].expert_tokens.empty());
        continue;
      }
      const std::string router = router_weight_name(c, l, false);
      EXPECT_TRUE(qb.count(router) && qb.at(router) == sb.at(router)) << arch << ": " << router;
      const std::string router_module = router.substr(0, router.size() - 7);  // without ".weight"
      EXPECT_EQ(qc["extra_config"][router_module], json({{"bits", 16}, {"data_type", "fp"}})) << qc.dump();
      if (c.moe.shared_intermediate) {
        EXPECT_TRUE(qb.at(shared_gate_name(l)) == sb.at(shared_gate_name(l)));
        EXPECT_TRUE(qc["extra_config"].contains(pre + "mlp.shared_expert_gate")) << qc.dump();
      }
      const auto& tokens = rep.blocks[size_t(l)].expert_tokens;
      ASSERT_EQ(int64_t(tokens.size()), c.moe.num_experts);
      int64_t sum = 0;
      for (int64_t t : tokens) sum += t;
      EXPECT_EQ(sum, 8 * 32 * c.moe.top_k) << arch << ": every token routed to top_k experts";
    }
    fs::remove_all(m);
    fs::remove_all(root);
  }
}

// A fused-layout checkpoint (mlp.experts.gate_up_proj / down_proj) is written with per-expert names, as
// AutoRound unfuses it: SignRound on it writes the bytes of its per-expert twin, tensor for tensor, with
// an expert kept in 16 bit (--fp_layers) written in the stored dtype.
TEST(PipelineMoe, FusedCheckpointWritesThePerExpertOutput) {
  const std::string m = test::temp_path("pmoe_split"), f = test::temp_path("pmoe_fused");
  const std::string qm = test::temp_path("pmoe_split_q"), qf = test::temp_path("pmoe_fused_q");
  write_synthetic_model(m, tiny_moe_config("qwen3_moe"), 43, DType::BF16);
  write_fused_twin(m, f);
  ASSERT_TRUE(HfModel::open(f)->fused_experts(1));
  auto o = test::moe_quantize_options(m, qm, 3);
  o.fp_layers = {"experts.5."};
  quantize_model(o);
  o.model_dir = f;
  o.output_dir = qf;
  quantize_model(o);
  const auto a = test::tensor_bytes(qm + "/model.safetensors"), b = test::tensor_bytes(qf + "/model.safetensors");
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a) EXPECT_TRUE(b.count(name) && b.at(name) == bytes) << name;
  EXPECT_TRUE(a.count("model.layers.1.mlp.experts.5.up_proj.weight"));  // kept, bf16
  EXPECT_EQ(quant_config(qm), quant_config(qf));
  for (const auto& d : {m, f, qm, qf}) fs::remove_all(d);
}

// Experts that the calibration never reaches: counted in the log and the report, and SignRound leaves
// them at their initial rounding (their packed tensors equal plain RTN's).
TEST(PipelineMoe, ExpertsWithoutTokensAreCountedAndKeepTheirInitialRounding) {
  const std::string m = test::temp_path("pmoe_idle"), qt = test::temp_path("pmoe_idle_t"), qr = test::temp_path("pmoe_idle_r");
  write_synthetic_model(m, tiny_moe_config("qwen3_moe"), 44);
  make_router_skip_middle_experts(m, 1);
  auto o = test::moe_quantize_options(m, qt, 6);
  testing::internal::CaptureStderr();
  const QuantizeReport rep = quantize_model(o);
  const std::string err = testing::internal::GetCapturedStderr();
  const auto& tokens = rep.blocks[1].expert_tokens;
  ASSERT_EQ(tokens.size(), 8u);
  for (int e = 2; e < 6; ++e) EXPECT_EQ(tokens[size_t(e)], 0) << "expert " << e;
  EXPECT_GT(tokens[0] + tokens[7], 0);
  EXPECT_NE(err.find("block 2/2: 4 of 8 experts received no token"), std::string::npos) << err;
  o.output_dir = qr;
  o.tune.iters = 0;
  o.disable_opt_rtn = true;
  quantize_model(o);
  const auto t = test::tensor_bytes(qt + "/model.safetensors"), r = test::tensor_bytes(qr + "/model.safetensors");
  for (int e = 0; e < 8; ++e)
    for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string n = "model.layers.1.mlp.experts." + std::to_string(e) + "." + part + ".qweight";
      if (e >= 2 && e < 6) {
        EXPECT_TRUE(t.at(n) == r.at(n)) << n << " moved without tokens";
      }
      if (e == 0 || e == 7) {
        EXPECT_FALSE(t.at(n) == r.at(n)) << n << " was not tuned";
      }
    }
  for (const auto& d : {m, qt, qr}) fs::remove_all(d);
}

// The FP pass's statistics per expert cover every routed token: each token reaches top_k distinct
// experts, so the experts' input imatrix sums to top_k times the router's input sums, channel by channel.
TEST(PipelineMoe, PerExpertStatisticsCoverEveryRoutedToken) {
  const std::string m = test::temp_path("pmoe_stats");
  write_synthetic_model(m, tiny_moe_config("qwen2_moe", 1), 45);
  auto model = HfModel::open(m);
  const ModelConfig& c = model->config();
  Context ctx(Device{}, 2);
  const BlockDims d = c.block_dims(0);
  const BlockWeights w = model->load_block(0, ctx);
  const int64_t n = 3, T = 24;
  Tensor x = Tensor::empty({n, T, d.C}, DType::F32, ctx), y = Tensor::empty({n, T, d.C}, DType::F32, ctx);
  const std::vector<float> xr = test::randn<float>(size_t(x.numel()), 46);
  std::copy(xr.begin(), xr.end(), x.f32());
  const RopeTable rope = make_rope_table(c, T);
  std::vector<int32_t> pos(size_t(n * T));
  for (int64_t i = 0; i < n * T; ++i) pos[size_t(i)] = int32_t(i % T);
  Imatrix im;
  ActMax amax;
  std::vector<int64_t> routed;
  block_forward_all(ctx, quant::TuneLane{}, d, w, {1, T, pos.data(), rope.cos.data(), rope.sin.data(), nullptr}, x, y,
                    n, 1, false, {&im, &amax, &routed});
  int64_t total = 0;
  for (int64_t e = 0; e < d.moe.E; ++e) {
    ASSERT_GT(routed[size_t(e)], 0) << "the check below needs every expert reached";
    total += routed[size_t(e)];
    EXPECT_EQ(im.at("expert." + std::to_string(e) + ".down").size(), size_t(d.moe.I));
    EXPECT_LE(amax.at("expert." + std::to_string(e) + ".in"), amax.at("mlp_in"));
  }
  EXPECT_EQ(total, n * T * d.moe.K);
  EXPECT_EQ(im.at("shared.down").size(), size_t(d.moe.Is));
  const auto& all = im.at("mlp_in");
  for (int64_t ch = 0; ch < d.C; ++ch) {
    double sum = 0;
    for (int64_t e = 0; e < d.moe.E; ++e) sum += im.at("expert." + std::to_string(e) + ".in")[size_t(ch)];
    EXPECT_NEAR(sum, double(d.moe.K) * all[size_t(ch)], 1e-4 * double(d.moe.K) * all[size_t(ch)]) << "channel " << ch;
  }
  EXPECT_EQ(linear_input_key("mlp.experts.3.up_proj"), "expert.3.in");
  EXPECT_EQ(linear_input_key("block_sparse_moe.experts.7.w2"), "expert.7.down");
  EXPECT_EQ(linear_input_key("mlp.shared_expert.gate_proj"), "mlp_in");
  EXPECT_EQ(linear_input_key("mlp.shared_expert.down_proj"), "shared.down");
  fs::remove_all(m);
}

// Worlds 2 and 4 of the in-process lane write the serial run's bytes: SignRound (experts see different
// token counts per shard; the exchanged gradient is the full batch's) and opt-RTN (imatrix per expert).
TEST(PipelineMoe, DeterministicWorldsWriteTheSerialBytes) {
  const std::string m = test::temp_path("pmoe_world"), q = test::temp_path("pmoe_world_q");
  write_synthetic_model(m, tiny_moe_config("qwen2_moe"), 47);
  for (int iters : {4, 0}) {
    auto o = test::moe_quantize_options(m, q, iters);
    o.calib.seqlen = 16;
    quantize_model(o);
    const std::string ref = read_text_file(q + "/model.safetensors");
    for (const char* world : {"2", "4"}) {
      o.parallel = parallel::ParallelSetting::parse(world);
      o.devices = std::string(world) == "2" ? "cpu:0,cpu:1" : "cpu:0,cpu:1,cpu:2,cpu:3";
      const QuantizeReport r = quantize_model(o);
      EXPECT_EQ(iters ? r.blocks[0].world_tune : r.blocks[0].world_search, std::stoi(world));
      EXPECT_TRUE(read_text_file(q + "/model.safetensors") == ref) << "iters " << iters << ", world " << world;
    }
  }
  fs::remove_all(m);
  fs::remove_all(q);
}

// --amp on a MoE model (bf16 GEMM operands, calibration activations in bf16): the serial run and world 2
// write the same bytes, the tuning reduces each block's loss as fp32's does (no more than 10% above it;
// after 8 iterations either may end lower: amp's was 12% lower on a Xeon, within 10% on a Zen 4), and
// the output differs from fp32's (amp really ran). (The fp32 run's log also says when every expert
// received tokens.)
TEST(PipelineMoe, AmpWorldsWriteTheSerialBytesAndTuneAsFp32) {
  if (!cpu::bf16_gemm_supported()) GTEST_SKIP() << "no bf16 GEMMs here: " << cpu::bf16_support_summary();
  const std::string m = test::temp_path("pmoe_amp"), q = test::temp_path("pmoe_amp_q");
  write_synthetic_model(m, tiny_moe_config("qwen3_moe"), 49);
  auto o = test::moe_quantize_options(m, q, 8);
  o.calib.seqlen = 16;
  o.amp = false;
  testing::internal::CaptureStderr();
  const QuantizeReport fp = quantize_model(o);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("block 2/2: every one of 8 experts received tokens ("), std::string::npos) << log;
  const std::string fp_bytes = read_text_file(q + "/model.safetensors");
  o.amp = true;
  const QuantizeReport amp = quantize_model(o);
  const std::string ref = read_text_file(q + "/model.safetensors");
  EXPECT_FALSE(ref == fp_bytes) << "amp wrote the fp32 run's bytes";
  ASSERT_EQ(amp.blocks.size(), fp.blocks.size());
  for (size_t b = 0; b < fp.blocks.size(); ++b) {
    EXPECT_LT(amp.blocks[b].loss_best, amp.blocks[b].loss_first) << b;
    EXPECT_LT(amp.blocks[b].loss_best, 1.1 * fp.blocks[b].loss_best) << b;
  }
  o.parallel = parallel::ParallelSetting::parse("2");
  o.devices = "cpu:0,cpu:1";
  const QuantizeReport w2 = quantize_model(o);
  EXPECT_EQ(w2.blocks[0].world_tune, 2);
  EXPECT_TRUE(read_text_file(q + "/model.safetensors") == ref) << "amp world 2 differs from serial";
  fs::remove_all(m);
  fs::remove_all(q);
}

// GGUF of each family (gguf:q4_k_m with its fake companion, SignRound): llama.cpp's layout (experts
// stacked per projection in ffn_*_exps [E, rows, cols], f32 routers and shared expert gate, the MoE keys,
// llama-quantize's 8-expert rules) and read back by our GGUF reader to the fake companion's weights
// (fp16 of the same dequantized values), expert by expert.
// llama.cpp stacks a layer's experts in one tensor of one type: a GGUF run keeps all of a layer's
// experts in their stored type, or refuses (before writing anything) to keep only some of them.
TEST(PipelineMoe, GgufKeepsEveryExpertOfALayerOrRefuses) {
  const std::string m = test::temp_path("pmoe_gk_m"), q = test::temp_path("pmoe_gk_q");
  json cfg = tiny_moe_config("qwen3_moe");
  cfg["hidden_size"] = 256;
  cfg["moe_intermediate_size"] = 256;
  cfg["head_dim"] = 64;
  cfg["mlp_only_layers"] = json::array();
  write_synthetic_model(m, cfg, 49, DType::BF16);
  auto o = test::moe_quantize_options(m, q, 0);
  o.format = "gguf:q4_k_m";
  o.fp_layers = {"layers.1.mlp.experts.3."};
  try {
    quantize_model(o);
    ADD_FAILURE() << "one expert of a stack kept";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.experts.3.gate_proj is kept in 16 bit but "
                                         "model.layers.1.mlp.experts.7.gate_proj is not"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(q));
  o.fp_layers = {"layers.1.mlp.experts."};
  quantize_model(o);
  std::string file;
  for (const auto& e : fs::directory_iterator(q))
    if (e.path().extension() == ".gguf") file = e.path().string();
  const GgufFile g = GgufFile::open(file);
  std::map<std::string, uint32_t> type;
  for (const auto& x : g.tensors) type[x.name] = x.type;
  for (const char* t : {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"})
    EXPECT_EQ(type[t], uint32_t(quant::GgmlType::BF16)) << t;
  EXPECT_EQ(type["blk.0.ffn_gate_exps.weight"], uint32_t(quant::GgmlType::Q4_K));
  fs::remove_all(m);
  fs::remove_all(q);
}

TEST(PipelineMoe, GgufOfEachFamilyReadsBackAsItsFakeCompanion) {
  for (const char* arch : kArchs) {
    const std::string m = test::temp_path(std::string("pmoe_gm_") + arch), q = test::temp_path(std::string("pmoe_gq_") + arch);
    json cfg = tiny_moe_config(arch);
    cfg["hidden_size"] = 256;  // whole 256-element k-quant rows
    cfg[std::string(arch) == "mixtral" ? "intermediate_size" : "moe_intermediate_size"] = 256;
    if (cfg.contains("shared_expert_intermediate_size")) cfg["shared_expert_intermediate_size"] = 256;
    if (cfg.contains("head_dim")) cfg["head_dim"] = 64;
    if (cfg.contains("mlp_only_layers")) cfg["mlp_only_layers"] = json::array();  // llama.cpp's qwen*moe: all MoE
    write_synthetic_model(m, cfg, 49);
    auto o = test::moe_quantize_options(m, q, 2);
    o.format = "gguf:q4_k_m,fake";
    quantize_model(o);
    std::string file;
    for (const auto& e : fs::directory_iterator(q + "/gguf-q4-k-m")) file = e.path().string();
    const GgufFile g = GgufFile::open(file);
    std::map<std::string, const GgufTensorInfo*> t;
    for (const auto& x : g.tensors) t[x.name] = &x;
    using quant::GgmlType;
    auto expect = [&](const std::string& name, GgmlType type, std::vector<uint64_t> dims) {
      ASSERT_TRUE(t.count(name)) << arch << ": " << name;
      EXPECT_EQ(GgmlType(t[name]->type), type) << arch << ": " << name;
      EXPECT_EQ(t[name]->dims, dims) << arch << ": " << name;
    };
    expect("blk.1.ffn_gate_exps.weight", GgmlType::Q4_K, {256, 256, 8});
    expect("blk.1.ffn_up_exps.weight", GgmlType::Q4_K, {256, 256, 8});
    expect("blk.1.ffn_down_exps.weight", GgmlType::Q6_K, {256, 256, 8});  // use_more_bits(1, 2)
    expect("blk.0.ffn_gate_inp.weight", GgmlType::F32, {256, 8});
    expect("blk.0.attn_v.weight", GgmlType::Q8_0, {256, 128});       // 8 experts: q8_0
    expect("blk.0.attn_k.weight", GgmlType::Q8_0, {256, 128});
    expect("blk.0.attn_output.weight", GgmlType::Q5_K, {256, 256});  // 8 experts, q4_k_m: q5_k
    const std::string a = g.string("general.architecture", "");
    EXPECT_EQ(a, std::string(arch) == "mixtral" ? "llama" : std::string(arch) == "qwen2_moe" ? "qwen2moe" : "qwen3moe");
    EXPECT_EQ(g.find(a + ".expert_count")->num, 8);
    EXPECT_EQ(g.find(a + ".expert_used_count")->num, 2);
    if (std::string(arch) == "qwen2_moe") {
      expect("blk.1.ffn_gate_inp_shexp.weight", GgmlType::F32, {256});
      expect("blk.1.ffn_down_shexp.weight", GgmlType::Q6_K, {256, 256});
      EXPECT_EQ(g.find(a + ".expert_shared_feed_forward_length")->num, 256);
    }
    auto gm = open_model(file), f = HfModel::open(q + "/fake");
    ASSERT_EQ(gm->config().moe.num_experts, 8);
    Context ctx(Device{}, 2);
    for (int64_t l = 0; l < 2; ++l) {
      const BlockWeights wa = gm->load_block(l, ctx), wb = f->load_block(l, ctx);
      auto la = quant::block_linears(wa), lb = quant::block_linears(wb);
      ASSERT_EQ(la.size(), lb.size());
      la.push_back({"router", &wa.router});
      lb.push_back({"router", &wb.router});
      if (wa.sgate.defined()) la.push_back({"sgate", &wa.sgate}), lb.push_back({"sgate", &wb.sgate});
      for (size_t k = 0; k < la.size(); ++k) {
        const bool half = la[k].first != "router" && la[k].first != "sgate";  // fake copies the f32 ones
        for (int64_t i = 0; i < la[k].second->numel(); ++i) {
          const float want = half ? f16_to_f32(f32_to_f16(la[k].second->f32()[i])) : la[k].second->f32()[i];
          ASSERT_EQ(want, lb[k].second->f32()[i]) << arch << " layer " << l << " " << la[k].first << " [" << i << "]";
        }
      }
    }
    fs::remove_all(m);
    fs::remove_all(q);
  }
  // A Qwen3-MoE with a dense layer: llama.cpp's qwen3moe has none, so GGUF is refused before writing.
  const std::string m = test::temp_path("pmoe_gdense"), q = test::temp_path("pmoe_gdense_q");
  write_synthetic_model(m, tiny_moe_config("qwen3_moe"), 50);
  auto o = test::moe_quantize_options(m, q, 2);
  o.format = "gguf:q4_k_m";
  o.overwrite = false;
  EXPECT_NE(test::error_of([&] { quantize_model(o); })
                .find("GGUF export: Qwen3MoeForCausalLM has dense layers (mlp_only_layers / decoder_sparse_step), "
                      "which llama.cpp's qwen3moe does not run"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(q));
  fs::remove_all(m);
}

// The float schemes on a MoE model (Qwen2-MoE: experts and a shared expert), SignRound, written as
// auto_round and llm_compressor from one tuning: both read back to the same weights, every expert
// packed under its per-expert name, the routers in compressed-tensors' ignore list, and NVFP4's global
// scale shared by each expert's gate/up pair (and the shared expert's) but not across experts.
TEST(PipelineMoe, FloatSchemesWriteEveryExpert) {
  const std::string m = test::temp_path("pmoe_fp"), q = test::temp_path("pmoe_fp_q");
  // Mixtral first: its packed experts (gate_proj ... .weight_packed) are read back under that spelling.
  write_synthetic_model(m, tiny_moe_config("mixtral", 1), 52);
  auto mx = test::moe_quantize_options(m, q, 2);
  mx.fmt = test::kFpSchemes[0].fmt;
  mx.format = "llm_compressor";
  quantize_model(mx);
  Context one(Device{}, 1);
  EXPECT_EQ(HfModel::open(q)->load_block(0, one).eg.size(), 8u);
  fs::remove_all(q);
  write_synthetic_model(m, tiny_moe_config("qwen2_moe"), 51);
  for (const auto& k : {test::kFpSchemes[0], test::kFpSchemes[3]}) {  // MXFP4, NVFP4
    SCOPED_TRACE(k.name);
    auto o = test::moe_quantize_options(m, q, 3);
    o.fmt = k.fmt;
    o.format = "auto_round,llm_compressor";
    quantize_model(o);
    auto a = HfModel::open(q + "/auto-round"), b = HfModel::open(q + "/llm-compressor");
    Context ctx(Device{}, 2);
    for (int64_t l = 0; l < 2; ++l) {
      const BlockWeights wa = a->load_block(l, ctx), wb = b->load_block(l, ctx);
      const auto la = quant::block_linears(wa), lb = quant::block_linears(wb);
      ASSERT_EQ(la.size(), 4u + 3 * 8 + 3);
      for (size_t i = 0; i < la.size(); ++i)
        for (int64_t j = 0; j < la[i].second->numel(); ++j)
          ASSERT_EQ(la[i].second->f32()[j], lb[i].second->f32()[j]) << la[i].first << " [" << j << "]";
    }
    const json qc = quant_config(q + "/llm-compressor");
    const json& ignore = qc["ignore"];
    for (const char* r : {"model.layers.0.mlp.gate", "model.layers.1.mlp.shared_expert_gate"})
      EXPECT_NE(std::find(ignore.begin(), ignore.end(), r), ignore.end()) << r << " not in " << ignore.dump();
    const auto t = test::tensor_bytes(q + "/llm-compressor/model.safetensors");
    const std::string e3 = "model.layers.1.mlp.experts.3.", e4 = "model.layers.1.mlp.experts.4.";
    EXPECT_TRUE(t.count(e3 + "down_proj.weight_packed"));
    if (k.fmt.fp == quant::FpFamily::Nvfp4) {
      const std::string g = "_proj.weight_global_scale";
      EXPECT_EQ(t.at(e3 + "gate" + g), t.at(e3 + "up" + g));
      EXPECT_NE(t.at(e3 + "gate" + g), t.at(e4 + "gate" + g));
      EXPECT_EQ(t.at("model.layers.1.mlp.shared_expert.gate" + g), t.at("model.layers.1.mlp.shared_expert.up" + g));
    }
    fs::remove_all(q);
  }
  fs::remove_all(m);
}

// FP8_STATIC on a MoE model (llm_compressor and auto_round): every expert Linear gets its own input
// scale from its routed tokens' maximum; experts that no token reaches (2..5 of layer 1) take the largest
// maximum of the layer's experts at that input, as AutoRound fills them; the scales are read back by the
// model loader in linear_slot order; with tuning, world 2 writes the serial bytes and the idle experts
// keep coefficient 1 (no gradient reaches them), so their scale stays the layer's largest.
TEST(PipelineMoe, Fp8StaticWritesEachExpertsInputScale) {
  const std::string m = test::temp_path("pmoe_fp8s"), q = test::temp_path("pmoe_fp8s_q");
  write_synthetic_model(m, tiny_moe_config("qwen3_moe"), 53);
  make_router_skip_middle_experts(m, 1);
  auto scales = [&](const std::string& dir) {
    std::map<std::string, float> r;
    auto f = SafetensorsFile::open(dir + "/model.safetensors");
    for (const auto& t : f->header().tensors)
      if (t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, ".input_scale") == 0) {
        float v;
        std::memcpy(&v, f->bytes(t), 4);
        r[t.name.substr(0, t.name.size() - 12)] = v;
      }
    return r;
  };
  auto o = test::moe_quantize_options(m, q, 0);
  o.fmt = test::fp8_static_format();
  o.format = "llm_compressor,auto_round";
  o.disable_opt_rtn = true;
  quantize_model(o);
  const auto rtn = scales(q + "/llm-compressor");
  EXPECT_TRUE(rtn == scales(q + "/auto-round"));
  const std::string l1 = "model.layers.1.mlp.experts.";
  for (const char* part : {"gate_proj", "down_proj"}) {
    float top = 0;
    for (int e : {0, 1, 6, 7}) top = std::max(top, rtn.at(l1 + std::to_string(e) + "." + part));
    for (int e = 2; e < 6; ++e) EXPECT_EQ(rtn.at(l1 + std::to_string(e) + "." + part), top) << e << " " << part;
    EXPECT_NE(rtn.at(l1 + "0." + part), rtn.at(l1 + "7." + part)) << part << ": one scale for all experts";
  }
  for (int e = 0; e < 8; ++e) EXPECT_EQ(rtn.at(l1 + std::to_string(e) + ".gate_proj"), rtn.at(l1 + std::to_string(e) + ".up_proj"));
  auto model = HfModel::open(q + "/llm-compressor");
  const ActQdq<float> a = block_input_scales(*model, 1);
  const auto specs = block_linear_specs(model->config(), 1);
  ASSERT_EQ(a.s.size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) EXPECT_EQ(a.s[k], rtn.at("model.layers.1." + specs[k].name)) << specs[k].name;

  o.tune.iters = 4;
  o.format = "llm_compressor";
  quantize_model(o);
  const std::string serial = read_text_file(q + "/model.safetensors");
  const auto tuned = scales(q);
  for (const char* part : {".gate_proj", ".down_proj"})  // the idle experts' coefficients never move (no gradient)
    for (int e = 0; e < 8; ++e) {
      const float idle = tuned.at(l1 + "2" + part), mine = tuned.at(l1 + std::to_string(e) + part);
      if (e >= 2 && e < 6) {
        EXPECT_EQ(mine, idle) << e << part;
      }
      EXPECT_LE(mine, idle) << e << part;
    }
  o.parallel = parallel::ParallelSetting::parse("2");
  o.devices = "cpu:0,cpu:1";
  quantize_model(o);
  EXPECT_TRUE(read_text_file(q + "/model.safetensors") == serial) << "world 2 differs from serial";
  fs::remove_all(m);
  fs::remove_all(q);
}

// The start summary counts experts together and names the routers' rule.
TEST(PipelineMoe, SummaryGroupsTheExperts) {
  QuantizeOptions o;
  o.fmt = {4, 32, true};
  o.fp_layers = {"layers.1.mlp.experts.3."};
  const ModelConfig c = parse_model_config(tiny_moe_config("qwen3_moe"), "config.json");
  std::string all;
  for (const auto& line : run_summary(c, o, 8, 32, false)) all += line + "\n";
  EXPECT_NE(all.find("quantized Linears: self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, "
                     "mlp.gate_proj, mlp.up_proj, mlp.down_proj, mlp.experts.*.gate_proj, mlp.experts.*.up_proj, "
                     "mlp.experts.*.down_proj\n"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("mlp.experts.*.gate_proj in 1 of 8 (experts x blocks) (--fp_layers layers.1.mlp.experts.3.)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("mixture of experts: 8 experts, top-2; routers kept in 16 bit"), std::string::npos) << all;
}

// The start summary's peak memory prices a MoE block's tuning tree as the tuner runs it: deterministic
// batches defer the experts' gradients (deeper levels without them, plus the held leaf operands, fewer
// under amp's bf16 copies), FP8_STATIC runs the ordinary tree (every level holds the experts).
TEST(PipelineMoe, SummaryPricesTheExpertTreeAsTheTunerRunsIt) {
  nlohmann::json j = tiny_moe_config("qwen3_moe");
  j["hidden_size"] = 1024;
  j["moe_intermediate_size"] = 512;
  j["num_experts"] = 64;
  j["intermediate_size"] = 1024;
  const ModelConfig c = parse_model_config(j, "config.json");
  auto block_mib = [&](const QuantizeOptions& o) {
    std::string all;
    for (const auto& line : run_summary(c, o, 8, 256, false)) all += line + "\n";
    const size_t at = all.find("one block ");
    EXPECT_NE(at, std::string::npos) << all;
    return at == std::string::npos ? 0.0 : std::stod(all.substr(at + 10));
  };
  QuantizeOptions o;
  o.fmt = {4, 128, true};
  o.tune.batch_size = 8;
  const double deferred = block_mib(o);
  QuantizeOptions amp = o;
  amp.tune.amp = true;
  QuantizeOptions micro = o;
  micro.tune.deterministic = false;
  QuantizeOptions st = o;
  st.fmt = test::fp8_static_format();
  const double experts = 64.0 * 3 * 1024 * 512 * 4 / 1048576;  // fp32 MiB of one layer's experts
  EXPECT_GT(deferred, block_mib(micro)) << "held leaf operands";
  EXPECT_NE(block_mib(amp), deferred) << "amp holds other operand sizes";
  EXPECT_GT(block_mib(st), deferred + experts) << "FP8_STATIC's deeper levels hold the experts";
}

// Deterministic tuning holds every leaf's forward cache at once in a MoE block where the experts run once
// over all leaves' rows (fp32; amp at the avx512_bf16 level), so its tuning caches grow with the global
// batch, not the micro-batch; otherwise, and without --deterministic, they stay a micro-batch's.
TEST(PipelineMoe, SummaryHoldsEveryLeafsCacheWhereExpertsStackLeaves) {
  const ModelConfig c = parse_model_config(tiny_moe_config("qwen3_moe"), "config.json");
  auto caches = [&](bool amp, bool det, int gas) {
    QuantizeOptions o;
    o.fmt = {4, 32, true};
    o.tune.batch_size = 2;
    o.tune.gradient_accumulate_steps = gas;
    o.tune.amp = amp;
    o.tune.deterministic = det;
    const std::string line = peak_memory_line(c, o, 64, 4096, 0);
    const size_t at = line.find("tuning caches ");
    EXPECT_NE(at, std::string::npos) << line;
    return at == std::string::npos ? -1.0 : std::stod(line.substr(at + 14));
  };
  ASSERT_GT(caches(false, true, 1), 20.0) << "MiB: large enough for the line's rounding";
  EXPECT_NEAR(caches(false, true, 4), 4 * caches(false, true, 1), 2.0) << "8 leaves against 2";
  if (cpu::CpuOps::has_row_gemms(true))  // amp at the avx512_bf16 level stacks leaves too
    EXPECT_NEAR(caches(true, true, 4), 4 * caches(true, true, 1), 2.0) << "amp, 8 leaves against 2";
  else
    EXPECT_EQ(caches(true, true, 4), caches(true, true, 1)) << "amp: leaf by leaf";
  EXPECT_EQ(caches(false, false, 4), caches(false, false, 1)) << "micro-batches";
}

// The peak memory line adds what the process holds before the first block (measured by the run) and
// the idle blocks the allocator may keep beside the live ones (at most 1/kReuseSlack of them,
// core/context.h) to the live estimate, and names each part.
TEST(PipelineMoe, SummaryPeakAddsTheProcessAndTheIdleCache) {
  const ModelConfig c = parse_model_config(tiny_moe_config("qwen3_moe"), "config.json");
  QuantizeOptions o;
  o.fmt = {4, 32, true};
  const std::string line = peak_memory_line(c, o, 8, 256, 100.0 * 1048576);
  auto part = [&](const std::string& name) {
    const size_t at = line.find(name);
    EXPECT_NE(at, std::string::npos) << line;
    return at == std::string::npos ? -1.0 : std::stod(line.substr(at + name.size()));
  };
  const double total = part("estimated peak memory: "), process = part("this process now "),
               act = part("activations "), block = part("one block "), caches = part("tuning caches "),
               idle = part("idle cached buffers up to ");
  EXPECT_EQ(process, 100.0);
  EXPECT_NEAR(idle, (act + block + caches) / double(Allocator::kReuseSlack), 1.0) << line;
  EXPECT_NEAR(total, process + act + block + caches + idle, 3.0) << line;
  EXPECT_GT(block, 0.0);
  std::string all;
  for (const auto& l : run_summary(c, o, 8, 256, false, 100.0 * 1048576)) all = l;
  EXPECT_EQ(all, line) << "the summary's last line";
}
