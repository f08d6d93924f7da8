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

// Why the Linear `full_name` of shape [out, in] stays in 16 bit, or "" when it is quantized:
// a dimension not a multiple of 32, or a --fp_layers substring.
std::string kept_fp_reason(const std::string& full_name, int64_t out, int64_t in, const std::vector<std::string>& fp_layers);

// Parameters of one block's Linears (q, k, v, o, gate, up, down).
int64_t block_linear_params(const ModelConfig& cfg);

// The lines printed at the start of a run.
std::vector<std::string> run_summary(const ModelConfig& cfg, const QuantizeOptions& opt, int64_t nsamples,
                                     int64_t seqlen, bool lm_head_q);

}  // namespace ar
