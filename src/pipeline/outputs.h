// The outputs of one quantize run, one per --format entry ("auto_round,auto_gptq" writes both from
// one tuning). AutoRound's layout: a single format writes its files directly into --output_dir; several
// write one subdirectory each, named as AutoRound names them (":" and "_" -> "-": auto-round,
// auto-gptq, auto-awq, fake). Every output gets the same tuned weights in its own packing, its own
// quantization_config and extra_config, and copies of the source's tokenizer and generation files.
// The fake format (dense QDQ weights) writes no quantization_config into config.json, as AutoRound's
// fake export does: it is a plain 16-bit model that every runtime loads (quantization_config.json
// beside it records how it was made).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/context.h"
#include "export/shard_writer.h"
#include "model/loader.h"
#include "pipeline/quantize.h"
#include "pipeline/resume_state.h"
#include "pipeline/run_summary.h"
#include "quant/signround.h"

namespace ar {

constexpr uint64_t kOutputShardBytes = 5ull << 30;  // <= 5 GB per shard, as AutoRound writes

// The formats of a --format list, in order; InvalidInput for an unknown or repeated one, one the
// options cannot be written in (auto_awq needs 4 bits and keeps lm_head in 16 bit), or a second GGUF.
std::vector<std::string> parse_formats(const QuantizeOptions& opt);

// The quantizations a format list asks for, each tuned once: the int scheme of --bits/--group_size
// (auto_round, auto_gptq, auto_awq; fake with them) and a GGUF preset (with fake when no int format
// is listed: the file's weights dequantized). A GGUF type's scales and mins are not the int formats'
// per-group scale and integer zero, so a list with both runs two tunings per block on one load of the
// block, one calibration and one FP pass (pipeline/quantize.cpp).
struct FormatPlan {
  std::vector<std::string> int_formats;  // OutputSet's sinks, in list order
  std::string gguf;                      // "gguf:<preset>" or empty
  bool gguf_fake = false;                // fake goes with the GGUF file
  bool several = false;                  // more than one output: each in its own subdirectory
};
FormatPlan plan_formats(const QuantizeOptions& opt);
// The subdirectory of `format` when a run writes several ("auto_gptq" -> "auto-gptq").
std::string format_subdir(const std::string& format);

class OutputSet {
 public:
  // `root` is the (temporary) output directory; subdirectories are created there for several formats.
  // Tensors and quantization_config take `model`'s names (HfModel::names: a multimodal checkpoint's
  // prefixes); every method below takes text-model names.
  OutputSet(const QuantizeOptions& opt, const std::string& root, uint64_t shard_bytes, const HfModel& model);
  size_t size() const { return sinks_.size(); }
  // An unquantized tensor of the model, as stored (or in fp16 for the GPTQ/AWQ formats), under
  // `out_name` when given (a Mixtral expert's w1 written as gate_proj).
  void copy_tensor(const HfModel& m, const std::string& name, Context& ctx, const std::string& out_name = "");
  // Computed values in `dtype` (fp16 in the GPTQ/AWQ formats): a GGUF run's fake companion (the file's
  // dequantized tensors), a kept expert of a fused checkpoint.
  void add_tensor(Context& ctx, const std::string& name, const Tensor& t, DType dtype = DType::F16);
  // A tuned Linear (name: full module name, e.g. model.layers.0.mlp.up_proj); `lm_head` adds its
  // extra_config entry where the format lists it, as does a Linear whose --layer_config format differs
  // from the run's (auto_gptq: a `dynamic` override).
  void add_linear(Context& ctx, const std::string& name, const quant::TunedLinear& L, bool lm_head = false);
  // A Linear kept in 16 bit (extra_config {"bits": 16, "data_type": "fp"}, as AutoRound writes it).
  void keep_fp(const std::string& name);
  // The model's tensors outside the language model (HfModel::foreign_names), copied as copy_tensor does.
  void copy_foreign(Context& ctx);
  // Closes the shards and writes config.json, quantization_config.json and the source's tokenizer and
  // generation files into every output; `seqlen` is the calibration's (after any clamp). With
  // `gguf_preset`, the outputs hold a GGUF file's dequantized weights (data_type "gguf:<preset>").
  void finish(const QuantizeOptions& opt, int64_t seqlen, bool lm_head_q, const std::string& gguf_preset = "");
  // For --resume: every output's writer and extra_config, in format order.
  std::vector<ResumeOutput> resume_outputs();
  void keep_files();

 private:
  struct Sink {
    std::string format, dir;
    bool awq = false, gptq = false, fp16 = false;
    bool flt = false;  // the float schemes (pipeline/float_export.h)
    std::unique_ptr<ShardWriter> writer;
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    std::set<std::string> in_block;  // names inside a block of the Linears it packs (mlp.down_proj)
    std::string tensor_name(const std::string& name) const;  // as this format writes it (Mixtral's fake: w1)
  };
  std::vector<Sink> sinks_;
  const HfModel& model_;
  bool sym_;
  int bits_;
  int64_t group_;
  quant::QuantFormat opt_fmt_;
  LayerRules rules_;  // each Linear's format (--layer_config)
};

}  // namespace ar
