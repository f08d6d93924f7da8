// What the log says before any work (issue 11, item 2): the model and its parameter count, the method,
// which Linears are quantized and which stay in 16 bit with the reason, the calibration, and an
// estimate of peak memory. The layer rule itself (AutoRound's) lives here too, so the plan printed is
// the plan executed.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "pipeline/quantize.h"

namespace ar {

// Which Linears are quantized (issue 11, item 5): AutoRound's rule (both dimensions multiples of 32),
// --fp_layers, and the shape rules of the loaders and kernels that read each output format, checked
// before any tuning so that every written layer loads:
//   auto_round, auto_gptq, auto_awq: in_features a multiple of group_size. transformers + auto-round
//     (QuantLinear reshapes the weight into whole groups), gptqmodel, and vLLM's GPTQ, AWQ and Marlin
//     kernels all require it; a partial last group (e.g. hidden 576 at group 128) loads nowhere;
//   auto_awq: out_features a multiple of 8 (eight 4-bit codes per int32 along the output);
//   fake: none beyond AutoRound's (the weight is stored dequantized).
// --layer_config decides a Linear's own format (or keeps it) ahead of the loader rules, which then
// check the Linear in its own group size. A layer that breaks a rule of any requested format stays in
// 16 bit, with the reason.
struct LayerRules {
  std::vector<std::string> fp_layers;
  LayerConfig layer_config;
  quant::QuantFormat fmt;  // the run's scheme
  int64_t group_size = 128;
  std::vector<std::string> formats = {"auto_round"};
  // Float schemes: AutoRound's rule for them instead of the int one (MX and NVFP4 keep Linears whose
  // in_features is not a multiple of the group in 16 bit; FP8 tiles take any shape).
  bool float_weights = false, float_groups = false;
  static LayerRules of(const QuantizeOptions& opt);
};

// The loader rule that `format` breaks for a Linear of shape [out, in], or "".
std::string loader_shape_rule(const std::string& format, int64_t out, int64_t in, int64_t group_size);

// What happens to the Linear `full_name` of shape [out, in]: kept in 16 bit (`kept`: the reason), or
// quantized in `fmt` (`entry`: the --layer_config entry that gave it, null for the run's scheme).
struct LayerChoice {
  std::string kept;
  quant::QuantFormat fmt;
  const LayerConfigEntry* entry = nullptr;
};
LayerChoice layer_choice(const std::string& full_name, int64_t out, int64_t in, const LayerRules& rules);
// "W8G128 sym": an int format as the summary and the report name it.
std::string format_name(const quant::QuantFormat& f);
// Why the user keeps `full_name` (a Linear, lm_head or model.embed_tokens) in 16 bit: "--fp_layers x"
// or "--layer_config k" in layer_choice's precedence, "" when neither does. A GGUF file honours this
// and nothing else of the rules (its types are the preset's).
std::string kept_by_user(const std::string& full_name, const LayerRules& rules);
// Why the Linear `full_name` of shape [out, in] stays in 16 bit, or "" when it is quantized.
std::string kept_fp_reason(const std::string& full_name, int64_t out, int64_t in, const LayerRules& rules);

// The group size the run uses: opt.fmt.group_size, except when it came from the scheme's default
// (no --group_size) and would leave Linears that AutoRound quantizes unloadable (in_features not a
// multiple of it, e.g. hidden 576 or 64 at 128): then the largest power-of-two divisor >= 32 that
// keeps every such Linear whole-grouped (576 -> 64), so the model is quantized and loads everywhere.
int64_t loadable_group_size(const ModelConfig& cfg, const QuantizeOptions& opt);

// Parameters of the largest block (its Linears, norms, a MoE router: model/linear_specs.h).
int64_t max_block_params(const ModelConfig& cfg);

// Floats per token of a block's forward cache (the tuning and the collection passes keep one per
// micro-batch): attention (its inputs and output, and one log-sum-exp per head: the T x T scores
// live in per-thread tiles, kernels/cpu/attention.cpp), then the dense MLP's or the routed experts'
// and the shared expert's.
int64_t block_cache_floats(const BlockDims& d);

// "estimated peak memory: ..." of a serial run: `process_bytes`, what the process holds before the
// first block (the caller measures it: libraries, tokenizer, calibration tokens), plus one block's
// live bytes (calibration activations, the block and its tuning state, the tuning loop's forward
// caches) and the idle cached blocks the allocator may keep beside them (Allocator::kReuseSlack).
struct PeakMemory {
  double process = 0, activations = 0, block = 0, caches = 0, slack = 0;  // bytes
  double total() const { return process + activations + block + caches + slack; }
};
PeakMemory estimate_peak_memory(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples, int64_t seqlen,
                                double process_bytes);
std::string peak_memory_line(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples, int64_t seqlen,
                             double process_bytes);

// The lines printed at the start of a run, the peak memory line last.
std::vector<std::string> run_summary(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples,
                                     int64_t seqlen, bool lm_head_q, double process_bytes = 0);

}  // namespace ar
