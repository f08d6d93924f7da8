#include "pipeline/run_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/printable.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/linear_specs.h"
#include "model/loader.h"
#include "pipeline/float_export.h"
#include "pipeline/outputs.h"
#include "quant/signround.h"

namespace ar {

std::string format_name(const quant::QuantFormat& f) {
  char b[64];
  std::snprintf(b, sizeof b, "W%dG%lld %s", f.bits, static_cast<long long>(f.group_size), f.sym ? "sym" : "asym");
  return b;
}

LayerRules LayerRules::of(const QuantizeOptions& opt) {
  LayerRules r;
  r.fp_layers = opt.fp_layers;
  r.layer_config = opt.layer_config;
  r.fmt = opt.fmt;
  r.group_size = opt.fmt.group_size;
  r.formats = parse_formats(opt);
  r.float_weights = opt.fmt.is_float();
  r.float_groups = r.float_weights && opt.fmt.fp != quant::FpFamily::Fp8;
  return r;
}

std::string loader_shape_rule(const std::string& format, int64_t out, int64_t in, int64_t group_size) {
  if (format == "fake") return "";
  if (group_size > 0 && in % group_size)
    return "in_features " + std::to_string(in) + " not a multiple of group_size " + std::to_string(group_size) +
           ": a partial last group loads in neither transformers/auto-round, gptqmodel nor vLLM (" + format + ")";
  if (format == "auto_awq" && out % 8)
    return "out_features " + std::to_string(out) + " not a multiple of 8 (AWQ packs 8 codes per int32 along the output)";
  return "";
}

namespace {
// The --layer_config entry or --fp_layers substring deciding `full_name`, in AutoRound's precedence
// (layer_config.h): the last matching pattern, then --fp_layers, then the exact-name entry.
LayerChoice configured(const std::string& full_name, const LayerRules& rules) {
  LayerChoice c;
  c.fmt = rules.fmt;
  c.entry = rules.layer_config.pattern_match(full_name);
  if (!c.entry) {
    for (const auto& f : rules.fp_layers)
      if (!f.empty() && full_name.find(f) != std::string::npos) {
        c.kept = "--fp_layers " + f;
        return c;
      }
    c.entry = rules.layer_config.exact_match(full_name);
  }
  if (!c.entry) return c;
  if (c.entry->keeps_fp()) c.kept = "--layer_config " + printable(c.entry->key);
  else c.fmt = c.entry->format(rules.fmt);
  return c;
}
}  // namespace

std::string kept_by_user(const std::string& full_name, const LayerRules& rules) {
  return configured(full_name, rules).kept;
}

LayerChoice layer_choice(const std::string& full_name, int64_t out, int64_t in, const LayerRules& rules) {
  if (!rules.float_weights && (out % 32 || in % 32))
    return {"shape " + shape_str({out, in}) + " not a multiple of 32", rules.fmt, nullptr};
  LayerChoice c = configured(full_name, rules);
  if (!c.kept.empty()) return c;
  const int64_t g = c.fmt.group_size;
  if (rules.float_weights) {
    if (rules.float_groups && in % g)
      c.kept = "in_features " + std::to_string(in) + " not a multiple of group_size " + std::to_string(g);
    return c;
  }
  for (const auto& f : rules.formats)
    if (std::string why = loader_shape_rule(f, out, in, g); !why.empty()) {
      c.kept = why;
      return c;
    }
  return c;
}

std::string kept_fp_reason(const std::string& full_name, int64_t out, int64_t in, const LayerRules& rules) {
  return layer_choice(full_name, out, in, rules).kept;
}

namespace {
std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f MiB", bytes / double(1 << 20));
  return b;
}
}  // namespace

int64_t loadable_group_size(const ModelConfig& cfg, const QuantizeOptions& opt) {
  int64_t g = opt.fmt.group_size;
  const std::vector<std::string> formats = parse_formats(opt);
  const bool packed = std::any_of(formats.begin(), formats.end(), [](const std::string& f) { return f != "fake"; });
  if (opt.group_size_given || g <= 32 || !packed) return g;
  auto whole = [&](int64_t gs) {
    for (int64_t l = 0; l < cfg.num_layers; ++l)
      for (const auto& s : block_linear_specs(cfg, l))
        if (s.out % 32 == 0 && s.in % 32 == 0 && s.in % gs) return false;
    return true;
  };
  while (g > 32 && !whole(g)) g /= 2;
  return whole(g) ? g : opt.fmt.group_size;
}

int64_t max_block_params(const ModelConfig& cfg) {
  int64_t n = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) n = std::max(n, block_params(cfg, l));
  return n;
}

int64_t block_cache_floats(const BlockDims& d) {
  // sandwich norms keep the attention's and the feed-forward's outputs and their rstd
  const int64_t attn = 8 * d.C + d.H + (d.sandwich ? 2 * d.C + 2 : 0);
  if (!d.is_moe()) return attn + 4 * d.I;
  // the routed rows' gathered input and output, gate/up/SwiGLU, the routing; the shared expert
  return attn + d.moe.K * (2 * d.C + 4 * d.moe.I) + 2 * d.moe.E + (d.moe.Is ? 2 * d.C + 4 * d.moe.Is : 0);
}

namespace {
// "where": every block, or "n of total blocks" ("(experts x blocks)" for experts).
std::string where(int64_t count, int64_t total, bool experts) {
  if (count == total) return "every block";
  return std::to_string(count) + " of " + std::to_string(total) + (experts ? " (experts x blocks)" : " blocks");
}

// "quantized Linears", "kept in 16 bit" and "own formats" (--layer_config) over every block, each
// Linear group (experts counted together) with the number of blocks and Linears of each reason or format.
void layer_rule_lines(const ModelConfig& cfg, const LayerRules& rules, std::vector<std::string>& lines) {
  struct Group {
    int64_t total = 0, blocks = 0;
    std::map<std::string, int64_t> reasons;  // Linears kept per reason
    std::map<std::string, int64_t> formats;  // Linears per own format ("W8G128 sym (--layer_config k)")
  };
  std::vector<std::string> order;
  std::map<std::string, Group> groups;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    std::set<std::string> seen;
    for (const auto& s : block_linear_specs(cfg, l)) {
      if (!groups.count(s.group)) order.push_back(s.group);
      Group& g = groups[s.group];
      ++g.total;
      if (seen.insert(s.group).second) ++g.blocks;
      const LayerChoice c = layer_choice(HfModel::layer_prefix(l) + s.name, s.out, s.in, rules);
      if (!c.kept.empty()) ++g.reasons[c.kept];
      else if (c.entry) ++g.formats[format_name(c.fmt) + " (--layer_config " + printable(c.entry->key) + ")"];
    }
  }
  std::string quantized, kept, own;
  for (const auto& name : order) {
    const Group& g = groups[name];
    const bool experts = name.find(".*.") != std::string::npos;
    int64_t kept_n = 0;
    for (const auto& [why, count] : g.reasons) {
      kept += (kept.empty() ? "" : "; ") + name + " in " + where(count, g.total, experts) + " (" + why + ")";
      kept_n += count;
    }
    for (const auto& [fmt, count] : g.formats)
      own += (own.empty() ? "" : "; ") + name + " " + fmt.substr(0, fmt.find(" (")) + " in " +
             where(count, g.total, experts) + fmt.substr(fmt.find(" ("));
    if (kept_n < g.total) quantized += (quantized.empty() ? "" : ", ") + name;
  }
  lines.push_back("quantized Linears: " + (quantized.empty() ? std::string("none") : quantized));
  if (!own.empty()) lines.push_back("own formats: " + own);
  if (!kept.empty()) lines.push_back("kept in 16 bit: " + kept);
}
}  // namespace

// Peak memory, serial lane: what the process holds before any block (measured by the caller: its
// libraries, the tokenizer, the calibration tokens) plus the live bytes of one block's work, and the
// idle blocks the allocator may keep cached beside them (core/context.h bounds them by the live peak).
PeakMemory estimate_peak_memory(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples, int64_t seqlen,
                                double process_bytes) {
  const int64_t C = cfg.hidden_size, L = cfg.num_layers;
  // Peak memory, serial lane: the calibration activations (FP chain in and out, a q-chain per
  // quantization: outputs.h FormatPlan), one block in fp32 with its tuning state (V, weight copies,
  // gradients: ~4 more copies of its Linears, and with --deterministic one more per level of the
  // gradient tree beyond the first), and the per-batch forward caches of the tuning loop. A MoE
  // block's deeper tree levels hold its other Linears only; its experts' leaf products wait for the
  // batch's last leaf instead (quant/expert_grad_tree.h): per routed slot x, dy (C) and a, dg, du (I)
  // (under amp partly in bf16).
  const FormatPlan formats = plan_formats(opt);
  const double chains = double(!formats.int_formats.empty()) + double(!formats.gguf.empty());
  const double act = (2.0 + chains) * double(nsamples) * double(seqlen) * double(C) * (opt.tune.amp ? 2 : 4);
  const int64_t global_batch =
      std::min<int64_t>(nsamples, opt.tune.batch_size * std::max(1, opt.tune.gradient_accumulate_steps));
  const int depth = opt.tune.deterministic ? quant::signround_tree_levels(global_batch) : 1;
  double block = 0;
  for (int64_t l = 0; l < L; ++l) {
    const BlockDims d = cfg.block_dims(l);
    const double all = double(block_params(cfg, l)) * 4;
    const bool defer = d.is_moe() && !opt.fmt.act_static();  // FP8_STATIC: the ordinary tree (signround.cpp)
    const double experts = defer ? 12.0 * double(d.moe.E * d.C * d.moe.I) : 0;  // fp32 gate, up, down
    double need = all * (opt.tune.iters > 0 ? 5 : 2);
    if (opt.tune.iters > 0) need += (all - experts) * (depth - 1);
    if (opt.tune.iters > 0 && opt.tune.deterministic && global_batch > 1 && experts > 0) {
      // fp32: x, dy, a, dg, du in fp32; amp: x and dy in fp32 and bf16, a, dg, du in bf16 only
      const double slot = opt.tune.amp ? 12.0 * d.C + 6.0 * d.moe.I : 8.0 * d.C + 12.0 * d.moe.I;
      need += double(global_batch * seqlen * d.moe.K) * slot;
    }
    block = std::max(block, need);
  }
  int64_t cache = 0;  // per token, the largest block's
  bool moe = false;
  for (int64_t l = 0; l < L; ++l) {
    cache = std::max(cache, block_cache_floats(cfg.block_dims(l)));
    moe = moe || cfg.block_dims(l).is_moe();
  }
  // The forward caches of a micro-batch; in deterministic tuning of a MoE block where its experts' GEMMs
  // can stack leaves (cpu_ops.h: fp32, or amp at the avx512_bf16 level), of every leaf of the batch at
  // once (signround.cpp's experts_outer).
  const bool all_leaves = moe && opt.tune.iters > 0 && opt.tune.deterministic &&
                          cpu::CpuOps::has_row_gemms(opt.tune.amp) && !opt.fmt.act_static() && global_batch > 1;
  const int64_t cached = all_leaves ? global_batch : std::min<int64_t>(opt.tune.batch_size, nsamples);
  const double batch = double(cached) * double(seqlen) * double(cache) * 4;
  const double live = act + block + batch;
  return {process_bytes, act, block, batch, live / double(Allocator::kReuseSlack)};
}

std::string peak_memory_line(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples, int64_t seqlen,
                             double process_bytes) {
  const PeakMemory m = estimate_peak_memory(cfg, opt, nsamples, seqlen, process_bytes);
  return "estimated peak memory: " + mib(m.total()) + " (this process now " + mib(m.process) + ", activations " +
         mib(m.activations) + ", one block " + mib(m.block) + ", tuning caches " + mib(m.caches) +
         ", idle cached buffers up to " + mib(m.slack) + ")";
}

std::vector<std::string> run_summary(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples,
                                     int64_t seqlen, bool lm_head_q, double process_bytes) {
  std::vector<std::string> lines;
  const int64_t C = cfg.hidden_size, V = cfg.vocab_size, L = cfg.num_layers;
  int64_t params = V * C * (cfg.tie_word_embeddings ? 1 : 2) + C;
  for (int64_t l = 0; l < L; ++l) params += block_params(cfg, l);
  char b[320];
  std::snprintf(b, sizeof b, "model: %s (%s, %lld blocks, hidden %lld, intermediate %lld, heads %lld/%lld, %.1fM parameters)",
                opt.model_dir.c_str(), cfg.architecture.c_str(), (long long)L, (long long)C,
                (long long)cfg.intermediate_size, (long long)cfg.num_heads, (long long)cfg.num_kv_heads, double(params) / 1e6);
  lines.push_back(b);
  const std::string method = opt.tune.iters > 0 ? "SignRound, " + std::to_string(opt.tune.iters) + " iterations"
                             : opt.disable_opt_rtn ? std::string("RTN") : std::string("optimized RTN");
  // FP8_STATIC: as AutoRound, the tuning forward fake-quantizes the activations and tunes a coefficient
  // of each Linear's input maximum.
  const char* acts = !opt.fmt.act_static() ? "16-bit activations"
                     : opt.tune.iters > 0  ? "static FP8 activations: scales from the calibration maxima times a "
                                             "tuned coefficient, activations quantized in the tuning forward"
                                           : "static FP8 activations: scales from the calibration maxima";
  if (opt.fmt.is_float())
    std::snprintf(b, sizeof b, "quantizing %s weights (%s) with %s, format %s", float_scheme_name(opt.fmt).c_str(),
                  acts, method.c_str(), opt.format.c_str());
  else
    std::snprintf(b, sizeof b, "quantizing W%dG%lld %s with %s, format %s%s", opt.fmt.bits, (long long)opt.fmt.group_size,
                  opt.fmt.sym ? "sym" : "asym", method.c_str(), opt.format.c_str(), lm_head_q ? ", lm_head too" : "");
  lines.push_back(b);
  layer_rule_lines(cfg, LayerRules::of(opt), lines);
  if (cfg.is_moe()) {
    std::snprintf(b, sizeof b, "mixture of experts: %lld experts, top-%lld%s; routers%s kept in 16 bit",
                  (long long)cfg.moe.num_experts, (long long)cfg.moe.top_k,
                  cfg.moe.shared_intermediate ? ", a shared expert" : "",
                  cfg.moe.shared_intermediate && cfg.moe.shared_gate ? " and shared_expert_gate" : "");
    lines.push_back(b);
  }
  std::snprintf(b, sizeof b, "calibration: %lld samples x %lld tokens", (long long)nsamples, (long long)seqlen);
  lines.push_back(b);
  lines.push_back(peak_memory_line(cfg, opt, nsamples, seqlen, process_bytes));
  return lines;
}

}  // namespace ar
