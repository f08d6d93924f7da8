// The start summary's time estimate (pipeline/run_estimate.h): the work count, the measured tuning
// leaf (estimate_leaf.h), the collection-pass probe and the search probe (estimate_search.h), each
// against hand-worked prices or stand-ins whose times are known.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "kernels/cpu/bf16_ops.h"
#include "model/config.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "pipeline/estimate_leaf.h"
#include "pipeline/estimate_search.h"
#include "pipeline/quantize.h"
#include "pipeline/run_estimate.h"
#include "fp_schemes.h"
#include "test_util.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {
std::string tmpdir(const std::string& n) { return ar::test::temp_path("est_" + n); }

// Positions 0..T-1 with an identity rotary table, for a block's aux.
struct Positions {
  Positions(int64_t tokens, const BlockDims& d)
      : T(tokens), pos(size_t(tokens)), cs(size_t(tokens * d.D / 2), 1.f), sn(cs.size(), 0.f) {
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t);
  }
  BlockAux<float> aux() const { return {1, T, pos.data(), cs.data(), sn.data(), nullptr}; }
  int64_t T;
  std::vector<int32_t> pos;
  std::vector<float> cs, sn;
};
}  // namespace

// The time estimate's work count against the formula worked by hand for a tiny Llama (hidden 64,
// 4 heads of 16, 2 KV heads, intermediate 128), and the duration format.
TEST(Estimate, RunWorkCountsTheMatrixProductsAndScores) {
  auto cfg = parse_model_config(tiny_llama_config(3), "c");
  QuantizeOptions o;
  o.tune.iters = 10;
  o.tune.batch_size = 4;
  const double linear = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64 + 3 * 64.0 * 128;  // q, k+v, o, gate+up+down
  const double per_token = 2 * linear + 2 * 64.0 * 32;                             // + QK^T, PV at T = 32 (causal half)
  RunWork w = run_work(cfg, o, 8, 32, 3);
  const double tokens = 2 * 8 * 32.0 + 3 * 10 * 4 * 32.0;  // FP + q-chain passes, 10 iterations x 4 samples fwd+bwd
  EXPECT_DOUBLE_EQ(w.gflop, 3 * tokens * per_token / 1e9);
  EXPECT_DOUBLE_EQ(w.score_giga, 3 * (2 * 8 * 32.0 / 3 + 10 * 4 * 32.0) * 4 * 32 / 1e9);
  o.tune.iters = 0;  // RTN: the FP pass only
  EXPECT_DOUBLE_EQ(run_work(cfg, o, 8, 32, 3).gflop, 3 * 8 * 32.0 * per_token / 1e9);
  EXPECT_EQ(human_duration(3725), "1 h 02 min");
  EXPECT_EQ(human_duration(95), "1 min 35 s");
  EXPECT_EQ(human_duration(12.3), "12 s");
}

// A MoE block's products count the weights a token meets: the router, its top_k experts and the shared
// expert with its gate (Qwen2-MoE); Qwen3-MoE's dense layer 0 its MLP; Mixtral's experts are
// intermediate_size wide.
TEST(Estimate, RunWorkCountsTheActiveExperts) {
  QuantizeOptions o;
  o.tune.iters = 0;  // the FP pass only: blocks x n x T tokens
  const double C = 64, attn = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64, causal = 2 * 64.0 * 32;
  const auto gflop = [&](const ModelConfig& cfg) { return run_work(cfg, o, 8, 32, 2).gflop / (8 * 32.0) * 1e9; };
  const double qwen3_moe = C * 8 + 2 * 3 * C * 32, qwen2_moe = qwen3_moe + 3 * C * 64 + C;
  EXPECT_DOUBLE_EQ(gflop(parse_model_config(tiny_moe_config("qwen2_moe"), "c")), 2 * (2 * (attn + qwen2_moe) + causal));
  auto q3 = parse_model_config(tiny_moe_config("qwen3_moe"), "c");
  ASSERT_FALSE(q3.is_moe_layer(0));
  EXPECT_DOUBLE_EQ(gflop(q3), 2 * (attn + 3 * C * 128) + causal + 2 * (attn + qwen3_moe) + causal);
  EXPECT_DOUBLE_EQ(gflop(parse_model_config(tiny_moe_config("mixtral"), "c")), 2 * (2 * (attn + qwen3_moe) + causal));
  // After a restore at block 1 of Qwen3-MoE only the MoE layer is left.
  EXPECT_DOUBLE_EQ(run_work(q3, o, 8, 32, 1).gflop / (8 * 32.0) * 1e9, 2 * (attn + qwen3_moe) + causal);
  // DeepSeek-V3: latent attention (q_a 64, q_b to 4 heads of 16 + 32, kv_a to 32 + 32, kv_b to 4 x (16 + 16),
  // o from 4 x 16), q k^T over 48 and p v over 16 dims; layer 0 dense, layer 1 eight experts of 32 (top-2)
  // and an ungated shared expert.
  auto ds = parse_model_config(tiny_moe_config("deepseek_v3"), "c");
  const double mla = C * 64 + 64 * 4 * 48 + C * (32 + 32) + 32 * 4 * (16 + 16) + 4 * 16 * C, mla_causal = 2 * 4 * (48 + 16) * 16;
  const double sigmoid_moe = C * 8 + 2 * 3 * C * 32 + 3 * C * 32;
  EXPECT_DOUBLE_EQ(gflop(ds), 2 * (mla + 3 * C * 128) + mla_causal + 2 * (mla + sigmoid_moe) + mla_causal);
}

// The measured leaf's price of a run, worked by hand: iterations x (fixed + batch x per sample) plus the
// forward-only passes at a third of a sample; and the rule that measures a leaf only where it is cheap.
TEST(Estimate, LeafPricesIterationsAndPasses) {
  auto cfg = parse_model_config(tiny_llama_config(3), "c");
  const BlockDims d = cfg.block_dims(0);
  QuantizeOptions o;
  o.tune.iters = 10;
  o.tune.batch_size = 4;
  const RunWork w = run_work(cfg, o, 8, 32, 3, 2);  // two tunings (a GGUF preset's)
  EXPECT_DOUBLE_EQ(w.iterations, 3 * 2 * 10.0);
  EXPECT_DOUBLE_EQ(w.batch, 4.0);
  EXPECT_DOUBLE_EQ(w.pass_samples, 3 * 3 * 8.0);  // FP targets + two q-chains, each over 8 samples
  LeafTimes leaf = fit_leaf(0.5, 1.4, 4);
  EXPECT_DOUBLE_EQ(leaf.per_sample_s, 0.3);
  EXPECT_NEAR(leaf.fixed_s, 0.2, 1e-15);
  EXPECT_NEAR(estimate_seconds(w, leaf), 60 * (0.2 + 4 * 0.3) + 72 * 0.3 / 3, 1e-12);
  // The start's probes: a measured pass prices the passes (72 samples) instead of a third of the leaf's
  // sample, and the searches are added; the FLOP model keeps only the iterations' share.
  StartProbes probes;
  probes.pass_sample_s = 0.05;
  probes.search.seconds = 7;
  EXPECT_NEAR(estimate_seconds(w, leaf, probes), 60 * (0.2 + 4 * 0.3) + 72 * 0.05 + 7, 1e-12);
  const MachineRates rates{100, 2};
  EXPECT_GT(w.tune_gflop, 0);
  EXPECT_LT(w.tune_gflop, w.gflop);
  EXPECT_NEAR(estimate_seconds(w, rates, probes),
              w.tune_gflop / (100 * 0.75) + w.tune_score_giga * 36 / 2 + 72 * 0.05 + 7, 1e-12);
  EXPECT_NEAR(estimate_seconds(w, rates), w.gflop / (100 * 0.75) + w.score_giga * 36 / 2, 1e-12);
  // Noise that makes n samples as fast as one still leaves a sample a tenth of the measured time.
  leaf = fit_leaf(0.8, 0.7, 2);
  EXPECT_DOUBLE_EQ(leaf.per_sample_s, 0.1 * 0.7 / 2);
  EXPECT_DOUBLE_EQ(leaf.fixed_s, 0.7 - 0.07);
  // The leaf's batch: the run's, at least 2.
  EXPECT_EQ(leaf_samples(1), 2);
  EXPECT_EQ(leaf_samples(3), 3);
  EXPECT_EQ(leaf_samples(8), 8);
  // The leaf's 4 iterations of 1 and 4 samples (20 forward + backward passes at most) against the
  // run's 60 iterations of 4 (x 3 with the backward) and 72 forward passes: 1920 / 25344 = 7.6% of the
  // run's products, within the 15% limit, so it is measured; at 3 iterations 1920 / 9216 = 20.8%, not.
  EXPECT_DOUBLE_EQ(leaf_flops(d, 32, 4), 20 * sample_flops(d, 32));
  EXPECT_TRUE(leaf_worthwhile(w, d));
  o.tune.iters = 3;
  EXPECT_FALSE(leaf_worthwhile(run_work(cfg, o, 8, 32, 3, 2), d));
  o.tune.iters = 1;
  EXPECT_FALSE(leaf_worthwhile(run_work(cfg, o, 8, 32, 3, 2), d));
  o.tune.iters = 0;
  EXPECT_FALSE(leaf_worthwhile(run_work(cfg, o, 8, 32, 3, 2), d));
}

// The search probe (pipeline/estimate_search.h): a block's Linears cut to their first rows (the rest of
// the block shared), and a search timed on growing slices until one takes kMinProbeSeconds, its time
// scaled by the share of the weights searched. Stand-in searches sleep: 40 ms never reaches the
// threshold (every slice, up to the whole block, is searched), 150 ms does at once.
TEST(Estimate, SearchProbeTimesRowSlicesAndScalesThem) {
  Context ctx(Device{}, 2);
  const std::string m = tmpdir("search_probe");
  write_synthetic_model(m, tiny_llama_config(2), 5);
  auto model = HfModel::open(m);
  const BlockWeights block = model->load_block(0, ctx);
  double kept = 0;
  const BlockWeights quarter = first_rows(ctx, block, 0.25, &kept);
  const int64_t q = block.wq.dim(0), g = block.wg.dim(0);
  ASSERT_EQ(quarter.wq.dim(0), (q + 3) / 4);
  EXPECT_EQ(quarter.wq.dim(1), block.wq.dim(1));
  EXPECT_EQ(std::memcmp(quarter.wq.f32(), block.wq.f32(), size_t(quarter.wq.numel()) * 4), 0);
  EXPECT_EQ(quarter.wg.dim(0), (g + 3) / 4);
  EXPECT_EQ(quarter.ln1.f32(), block.ln1.f32()) << "the norms are shared, not copied";
  EXPECT_GE(kept, 0.25);
  EXPECT_LT(kept, 0.3);
  EXPECT_EQ(first_rows(ctx, block, 1e-9).wd.dim(0), 1) << "at least one row";
  for (const int sleep_ms : {40, 150}) {
    std::vector<int64_t> rows;  // wq's rows in each search
    const SearchProbe p = measure_search(ctx, block, [&](BlockWeights& slice) {
      rows.push_back(slice.wq.dim(0));
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    });
    if (sleep_ms == 40) {
      EXPECT_EQ(rows, (std::vector<int64_t>{(q + 63) / 64, (q + 15) / 16, (q + 3) / 4, q}));
      EXPECT_DOUBLE_EQ(p.share, 1.0);
      EXPECT_GE(p.block_s, 0.04);
    } else {
      EXPECT_EQ(rows, std::vector<int64_t>{(q + 63) / 64});
      EXPECT_LT(p.share, 0.1);
      EXPECT_GE(p.block_s, 0.15 / p.share);
    }
    EXPECT_GE(p.wall_s, double(rows.size()) * sleep_ms / 1000.0);
  }
  // The pass probe runs the collection pass (with and without the imatrix, fp32 and amp operands) and
  // leaves none of its buffers cached.
  const BlockDims d = model->config().block_dims(0);
  const int64_t T = 16;
  const Positions at(T, d);
  const BlockAux<float> aux = at.aux();
  Tensor x = Tensor::empty({5, T, d.C}, DType::F32, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i % 13) / 13.f;
  for (const bool amp : {false, cpu::bf16_gemm_supported()})
    for (const bool imatrix : {false, true}) {
      EXPECT_GT(measure_pass(ctx, d, block, aux, x, amp, imatrix), 0) << amp << imatrix;
      EXPECT_EQ(ctx.allocator().cached(), 0u);
    }
  model.reset();
  fs::remove_all(m);
}

// The leaf runs the real tuner on a model's block and inputs: a dense Llama block under W4G32 and
// FP8_STATIC (whose activation maxima the leaf supplies), and a Qwen2-MoE block (router, experts, shared
// expert); with fewer input samples than its batch it cycles them. It gives a positive price per
// sample and leaves none of its buffers cached in the context's allocator.
TEST(Estimate, LeafMeasuresTheTunerOnTheRunsBlock) {
  Context ctx(Device{}, 2);
  const int64_t T = 32;
  for (const char* arch : {"llama", "llama_fp8", "qwen2_moe"}) {
    const std::string m = tmpdir("leaf");
    const bool moe = std::string(arch) == "qwen2_moe";
    write_synthetic_model(m, moe ? tiny_moe_config(arch) : tiny_llama_config(2), 5);
    auto model = HfModel::open(m);
    const ModelConfig& cfg = model->config();
    const BlockDims d = cfg.block_dims(1);
    ASSERT_EQ(d.is_moe(), moe);
    quant::QuantFormat fmt(4, 32, true);
    if (std::string(arch) == "llama_fp8") fmt = test::fp8_static_format();
    const Positions at(T, d);
    const BlockAux<float> aux = at.aux();
    Tensor x = Tensor::empty({3, T, d.C}, DType::F32, ctx);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float((i * 7919) % 211) / 105.f - 1.f;
    QuantizeOptions o;
    if (!moe) {  // a micro-batch leaf of 4 samples, given the positions of one (the tuner repeats them)
      o.tune.deterministic = false;
      const LeafTimes batched = measure_leaf(ctx, d, model->load_block(1, ctx), fmt, o.tune, aux, x, 4);
      EXPECT_GT(batched.per_sample_s, 0) << arch;
      o.tune.deterministic = true;
    }
    const LeafTimes leaf = measure_leaf(ctx, d, model->load_block(1, ctx), fmt, o.tune, aux, x, 4);
    EXPECT_GT(leaf.per_sample_s, 0) << arch;
    EXPECT_GE(leaf.fixed_s, 0) << arch;
    EXPECT_GE(leaf.wall_s, leaf.fixed_s + leaf.per_sample_s) << arch;
    EXPECT_TRUE(std::isfinite(leaf.per_sample_s + leaf.fixed_s)) << arch;
    EXPECT_EQ(ctx.allocator().cached(), 0u) << arch;
    model.reset();
    fs::remove_all(m);
  }
}

// The leaf times the tuner it is given (`quantize --device cuda:N` gives the GPU's): a stand-in that
// takes 20 ms per iteration plus 10 ms per sample is priced at those figures, sees the leaf's batches
// (4 samples, then 1) and iteration counts, and nothing else tunes the block.
TEST(Estimate, LeafTimesTheTunerItIsGiven) {
  Context ctx(Device{}, 2);
  const int64_t T = 16;
  const std::string m = tmpdir("leaf_tuner");
  write_synthetic_model(m, tiny_llama_config(2), 5);
  auto model = HfModel::open(m);
  const BlockDims d = model->config().block_dims(0);
  const Positions at(T, d);
  const BlockAux<float> aux = at.aux();
  Tensor x = Tensor::empty({2, T, d.C}, DType::F32, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i % 13) / 13.f;
  std::vector<std::pair<int64_t, int>> calls;  // (batch, iterations)
  const LeafTuner fake = [&](BlockWeights&, const quant::SignRoundOptions& o, const Tensor& xs,
                             const std::vector<uint8_t>& mask) {
    calls.emplace_back(xs.dim(0), o.iters);
    EXPECT_EQ(int64_t(mask.size()), xs.dim(0) * T);
    for (int it = 0; it < o.iters; ++it) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + 10 * o.batch_size));
      if (o.progress) o.progress(it + 1, o.iters, 1.0, 1.0);
    }
  };
  QuantizeOptions o;
  o.tune.use_best_mse = false;
  const LeafTimes leaf = measure_leaf(ctx, d, model->load_block(0, ctx), quant::QuantFormat(4, 32, true), o.tune, aux,
                                      x, 4, fake);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t(4), 4));
  EXPECT_EQ(calls[1], std::make_pair(int64_t(1), 4));
  EXPECT_NEAR(leaf.per_sample_s, 0.010, 0.005);
  EXPECT_NEAR(leaf.fixed_s, 0.020, 0.010);
  EXPECT_GE(leaf.wall_s, 0.2);  // 4 x 60 ms + 4 x 30 ms
  model.reset();
  fs::remove_all(m);
}

