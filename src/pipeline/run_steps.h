// The steps of a quantization run that every lane shares (pipeline/quantize.cpp strings them together):
// option resolution against the model, the output's rules, the run's fingerprint, a block's layer plan,
// packing a finished block, its log line, lm_head tuning.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/output_guard.h"
#include "model/loader.h"
#include "pipeline/outputs.h"
#include "pipeline/quantize.h"
#include "pipeline/run_summary.h"
#include "quant/calib.h"

namespace ar::steps {

// NaN/Inf stop the run with the block and tensor named.
void check_finite(const Tensor& t, const std::string& what);
// Embeddings of n samples of T ids into x ([n, T, C], fp32 or bf16).
void embed(Context& ctx, const Tensor& emb, const int32_t* ids, Tensor& x, int64_t n, int64_t T, int64_t C,
           float scale = 1.f);
Tensor as_f32(const Tensor& t, Context& ctx);
// The output directory's rules (io/output_guard.h); checks --report too.
OutputSpec output_spec(const QuantizeOptions& opt, std::string* report_path);
// Everything that determines the output (a resume state from other options is refused).
nlohmann::ordered_json run_fingerprint(const QuantizeOptions& opt, const quant::CalibData& calib, bool lm_head_q,
                                       int processes);
// What a resume state's writer may hold: a model tensor or the packed tensors of one of its Linears.
std::function<std::string(const std::string&, const std::vector<int64_t>&)> resume_tensor_check(const HfModel& m);
// A note for the log and the report.
void note(QuantizeReport& rep, const std::string& s);
// --layer_config against the model: its keys that are Linear names told from its patterns, a note
// for each entry that matches no quantizable Linear (a router's: why it stays in 16 bit), and an
// lm_head entry turning --quant_lm_head on, as AutoRound does.
void bind_layer_config(QuantizeOptions& opt, const ModelConfig& cfg, QuantizeReport& rep);
// A note for each --fp_layers substring that is in no Linear's name (a router's: it stays in 16 bit
// anyway), so that a misspelt or foreign name (llama.cpp's attention.wq) does not keep nothing silently.
// --fp_layers and --layer_config names in a multimodal checkpoint's spelling (stored or transformers'
// module names: language_model.model.layers.3.mlp, model.language_model.layers.3.mlp) as the text-model
// names every rule is matched against (model/name_map.h).
void read_user_names(QuantizeOptions& opt, const NameMap& names);
void check_fp_layers(const QuantizeOptions& opt, const ModelConfig& cfg, QuantizeReport& rep);
// The scheme's default group size, lowered where loaders need whole groups (run_summary.h).
void adapt_group_size(QuantizeOptions& opt, const ModelConfig& cfg, QuantizeReport& rep);
// Whether lm_head is tuned and packed (--quant_lm_head under AutoRound's and the loaders' rules).
bool decide_lm_head(const QuantizeOptions& opt, const HfModel& model, QuantizeReport& rep);
// lm_head tuned like a block on the final-normed chains; packed into every output.
void tune_lm_head(Context& ctx, const HfModel& model, const QuantizeOptions& opt, const Tensor& x_fp, const Tensor& x_q,
                  int64_t T, const std::vector<uint8_t>& loss_mask, OutputSet& outputs, QuantizeReport& rep);
// The Linears of a block to quantize (short names) and their element count; br lists both kinds.
quant::LayerFormats plan_block_layers(BlockWeights& w, const std::string& prefix, const LayerRules& rules,
                                      BlockReport& br, int64_t* tuned_elems);
void record_tuning(const quant::BlockTuneResult& tr, BlockReport& br);
// A finished block into every output: tuned Linears packed, kept ones recorded, the rest copied.
void write_block(Context& ctx, const HfModel& model, int64_t layer, const BlockWeights& w,
                 const quant::BlockTuneResult& tr, const BlockReport& br, OutputSet& outputs);
// A MoE block's line: experts that received no calibration token, and the range of token counts.
void log_routing(const BlockReport& br, int64_t blocks);
// The block's log line, and with --verbose its tuning phases.
void log_block(const BlockReport& br, int64_t blocks, const quant::BlockTuneResult& tr, bool verbose);

}  // namespace ar::steps
