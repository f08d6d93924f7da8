#include "pipeline/run_estimate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar {

namespace {
constexpr double kIterationShareOfGemm = 0.75;  // whole tuning iteration vs the best GEMM (tune_bench)
constexpr double kExpsPerScore = 36;  // attention cost per score element, fwd + bwd, in exps (stories260K, seqlen 512)

// The feed-forward weights one token meets in `layer`: the dense MLP, or a MoE layer's router, its top_k
// experts and the shared expert with its gate.
double ffn_params_per_token(const ModelConfig& c, int64_t layer) {
  const double C = double(c.hidden_size);
  if (!c.is_moe_layer(layer)) return 3 * C * double(c.intermediate_size);
  const MoeConfig& m = c.moe;
  const double shared = m.shared_intermediate > 0 ? 3 * C * double(m.shared_intermediate) + (m.shared_gate ? C : 0) : 0;
  return double(m.num_experts) * C + double(m.top_k) * 3 * C * double(m.expert_intermediate) + shared;
}

// The attention Linears' weights one token meets, and the widths of its q k^T and p v products per head.
struct AttnWork {
  double params, qk, v;
};
AttnWork attention_work(const ModelConfig& c) {
  const double C = double(c.hidden_size), H = double(c.num_heads);
  if (!c.is_mla()) {
    const double q = H * double(c.head_dim), kv = double(c.num_kv_heads * c.head_dim);
    return {C * q + 2 * C * kv + q * C, double(c.head_dim), double(c.head_dim)};
  }
  const MlaConfig& m = c.mla;  // q_a / q_b or q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj
  const double qk = double(m.qk_nope_head_dim + m.qk_rope_head_dim), r = double(m.q_lora_rank);
  const double q = m.q_lora_rank ? C * r + r * H * qk : C * H * qk;
  return {q + C * double(m.kv_lora_rank + m.qk_rope_head_dim) +
              double(m.kv_lora_rank) * H * double(m.qk_nope_head_dim + m.v_head_dim) + H * double(m.v_head_dim) * C,
          qk, double(m.v_head_dim)};
}

}  // namespace

RunWork run_work(const ModelConfig& c, const QuantizeOptions& opt, int64_t n, int64_t T, int64_t blocks, int tunings) {
  const AttnWork attn = attention_work(c);
  double ffn = 0;  // the mean over the last `blocks` layers (the run's; after a restore, those left)
  for (int64_t l = std::max<int64_t>(c.num_layers - blocks, 0); l < c.num_layers; ++l) ffn += ffn_params_per_token(c, l);
  ffn /= double(std::max<int64_t>(std::min(blocks, c.num_layers), 1));
  const double linear = attn.params + ffn;
  const double per_token = 2 * linear + 2 * double(c.num_heads) * (attn.qk + attn.v) * double(T) / 2;  // Linears, then QK^T and PV (causal half)
  const double scores_per_token = double(c.num_heads) * double(T);  // one row of scores per head
  const bool q_chain = opt.tune.iters > 0 && opt.quanted_input;  // RTN runs no q-chain pass
  const double tokens = (q_chain ? 1.0 + tunings : 1.0) * double(n) * double(T);  // FP targets (+ q-chains): forward
  double tuned_tokens = 0;
  if (opt.tune.iters > 0) {
    const int64_t batch = std::min<int64_t>(n, opt.tune.batch_size * std::max(1, opt.tune.gradient_accumulate_steps));
    tuned_tokens = double(tunings) * double(opt.tune.iters) * double(batch) * double(T);
  }
  RunWork w;
  w.T = T;
  w.pass_samples = double(blocks) * tokens / double(std::max<int64_t>(T, 1));
  if (opt.tune.iters > 0) {
    w.iterations = double(blocks) * double(tunings) * double(opt.tune.iters);
    w.batch = double(std::min<int64_t>(n, opt.tune.batch_size * std::max(1, opt.tune.gradient_accumulate_steps)));
  }
  w.tune_gflop = double(blocks) * 3.0 * tuned_tokens * per_token / 1e9;
  w.tune_score_giga = double(blocks) * tuned_tokens * scores_per_token / 1e9;
  w.gflop = double(blocks) * tokens * per_token / 1e9 + w.tune_gflop;
  w.score_giga = double(blocks) * tokens / 3.0 * scores_per_token / 1e9 + w.tune_score_giga;  // a pass: 1/3 of fwd+bwd
  return w;
}

MachineRates measure_rates(Context& ctx, const ModelConfig& cfg, bool amp) {
  const int64_t M = 512, K = std::clamp<int64_t>(cfg.hidden_size, 64, 2048),
                N = std::clamp<int64_t>(cfg.intermediate_size, 64, 4096);
  std::vector<float> a(size_t(M * K), 0.01f), b(size_t(K * N), 0.02f), out(size_t(M * N));
  std::vector<uint16_t> ab(a.size(), f32_to_bf16(0.01f)), bb(b.size(), f32_to_bf16(0.02f));
  using Clock = std::chrono::steady_clock;
  double best = 1e30, best_exp = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms caches and kernel selection
    auto t0 = Clock::now();
    if (amp) cpu::gemm_bf16(ctx, false, false, M, N, K, 1.f, ab.data(), K, bb.data(), N, 0.f, out.data(), N);
    else cpu::gemm(ctx, false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, out.data(), N);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (float& x : out) x = -1.f;
    t0 = Clock::now();
    cpu::exp_inplace(out.data(), int64_t(out.size()));
    const double e = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s), best_exp = std::min(best_exp, e);
  }
  MachineRates r;
  r.gemm_gflops = 2.0 * double(M) * double(N) * double(K) / best / 1e9;
  r.exp_giga = double(out.size()) / best_exp / 1e9 * double(std::max(1, ctx.threads()));
  return r;
}

namespace {
double flop_seconds(double gflop, double score_giga, const MachineRates& r) {
  return gflop / (r.gemm_gflops * kIterationShareOfGemm) + score_giga * kExpsPerScore / r.exp_giga;
}
double pass_seconds(const RunWork& w, const StartProbes& probes) { return w.pass_samples * probes.pass_sample_s; }
}  // namespace

double estimate_seconds(const RunWork& w, const MachineRates& r, const StartProbes& probes) {
  if (probes.pass_sample_s <= 0) return flop_seconds(w.gflop, w.score_giga, r) + probes.search.seconds;
  return flop_seconds(w.tune_gflop, w.tune_score_giga, r) + pass_seconds(w, probes) + probes.search.seconds;
}

bool leaf_worthwhile(const RunWork& w, const BlockDims& d) {
  return w.iterations > 0 && leaf_flops(d, w.T, leaf_samples(int64_t(w.batch))) <= kLeafShareOfRun * w.gflop * 1e9;
}

double estimate_seconds(const RunWork& w, const LeafTimes& leaf, const StartProbes& probes) {
  const double passes = probes.pass_sample_s > 0 ? pass_seconds(w, probes) : w.pass_samples * leaf.per_sample_s / 3;
  return w.iterations * (leaf.fixed_s + w.batch * leaf.per_sample_s) + passes + probes.search.seconds;
}

std::string human_duration(double s) {
  char b[48];
  if (s >= 3600) std::snprintf(b, sizeof b, "%d h %02d min", int(s / 3600), int(s / 60) % 60);
  else if (s >= 60) std::snprintf(b, sizeof b, "%d min %02d s", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%.0f s", s);
  return b;
}

namespace {
// "estimated time: ~<seconds> (<what>; <passes>; <searches>; the run ETA ...)", empty parts left out.
std::string with_probes(const RunWork& w, double seconds, const std::string& what, const StartProbes& probes) {
  std::string parts = what;
  auto add = [&](const std::string& part) {
    if (part.empty()) return;
    if (!parts.empty()) parts += "; ";
    parts += part;
  };
  if (probes.pass_sample_s > 0) {
    char b[160];
    std::snprintf(b, sizeof b, "%.0f forward passes of a sample at %.4f s, measured now", w.pass_samples,
                  probes.pass_sample_s);
    add(b);
  }
  add(probes.search.what);
  add(std::string("the run ETA follows the first ") + (w.iterations > 0 ? "iterations" : "blocks"));
  return "estimated time: ~" + human_duration(seconds) + " (" + parts + ")";
}
}  // namespace

std::string time_estimate_line(const RunWork& w, const MachineRates& r, bool amp, const StartProbes& probes) {
  const bool tuned_only = probes.pass_sample_s > 0;  // the passes are priced by their own line
  const double gflop = tuned_only ? w.tune_gflop : w.gflop, scores = tuned_only ? w.tune_score_giga : w.score_giga;
  char b[320] = "";
  if (gflop > 0 || !tuned_only)
    std::snprintf(b, sizeof b,
                  "%.0f GFLOP of %s at this machine's %s GEMM rate, measured now at %.0f GFLOP/s, and %.1fG attention "
                  "scores",
                  gflop, tuned_only ? "SignRound iterations" : "matrix products", amp ? "bf16" : "fp32", r.gemm_gflops,
                  scores);
  return with_probes(w, estimate_seconds(w, r, probes), b, probes);
}

std::string time_estimate_line(const RunWork& w, const LeafTimes& leaf, int64_t block, const StartProbes& probes) {
  char b[400];
  std::snprintf(b, sizeof b,
                "%.0f SignRound iterations of %.0f samples at %.3f s + %.3f s per sample, measured now in %.1f s on "
                "block %lld and the first samples",
                w.iterations, w.batch, leaf.fixed_s, leaf.per_sample_s, leaf.wall_s, (long long)(block + 1));
  return with_probes(w, estimate_seconds(w, leaf, probes), b, probes);
}

}  // namespace ar
