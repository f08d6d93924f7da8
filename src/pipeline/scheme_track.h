// A quantization the run makes: one scheme family's choice of Linears, its --iters 0 search, what it
// fixes before SignRound, its quantized-input chain and its writers (docs/ARCHITECTURE.md, "Scheme
// tracks"). QuantizeRun (quantize.cpp) owns what every family shares: the FP pass and its statistics,
// the lanes, SignRound over the family's QuantFormat, the chain's forward, resume and progress. It
// runs every block through each track in turn and names no family; several formats from one run are
// several tracks, one per family in the --format list (outputs.h FormatPlan), each tuned on its own
// chain from one load of the block, one calibration and one FP pass.
//   WeightTrack (weight_track.h): int and float weights (QuantFormat), written by OutputSet as
//     auto_round / auto_gptq / auto_awq / llm_compressor / fake.
//   GgufTrack (gguf_track.h): a GGUF preset (llama.cpp's per-tensor types), one file and its fake.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "model/loader.h"
#include "pipeline/block_passes.h"
#include "pipeline/quantize.h"
#include "pipeline/resume_state.h"
#include "quant/signround.h"

namespace ar {

// What a track reads of the run it belongs to (references that outlive it).
struct TrackEnv {
  Context& ctx;
  const HfModel& model;
  const QuantizeOptions& opt;  // resolved (QuantizeRun::plan)
  QuantizeReport& rep;
  bool root;  // rank 0, the process that writes
};

// The statistics of the block's FP pass (null: no track asked for them), and the activation maxima a
// track asked for on its own chain.
struct BlockStats {
  const Imatrix* imatrix = nullptr;
  const ActMax* act_max = nullptr;
};

// What a track's finish reads: the FP chain at the last block's output (lm_head's tuning target), the
// calibration's sequence length and loss mask.
struct TrackFinish {
  const Tensor& x_fp;
  int64_t seqlen;
  const std::vector<uint8_t>& loss_mask;
};

class SchemeTrack {
 public:
  virtual ~SchemeTrack() = default;
  // Its name in the log's per-block lines ("gguf:q4_k_m") and the prefix of its phases in the report
  // when it is not the run's first track ("gguf_").
  virtual std::string label() const = 0;
  virtual std::string phase_prefix() const = 0;
  // SignRound's format for its Linears (tuning_hook may fix their parameters).
  virtual const quant::QuantFormat& format() const = 0;
  // The FP pass statistics it needs: the imatrix (its searches, its starting scales), and the maxima of
  // the Linears' inputs (static activation scales), read on its own chain when it tunes on one.
  virtual bool wants_imatrix() const = 0;
  virtual bool wants_act_max() const { return false; }
  // The start summary: whether run_summary's layer-rule lines describe it, and a line of its own.
  virtual bool follows_layer_rules() const { return false; }
  virtual std::string summary_line() const { return ""; }
  // Its outputs opened under the run's (temporary) output directory (with --resume, files kept on an
  // interruption); rank 0 only.
  virtual void open(const std::string& dir) = 0;
  // The embeddings written; `embed(table, x)` fills a chain's start from an embedding table, for a
  // track whose chain starts from its own quantized table.
  virtual void embeddings(const Tensor& emb, const std::function<void(const Tensor&, Tensor&)>& embed) = 0;
  // The block's Linears it quantizes (short names) and their formats, their element count, the kept
  // ones' reasons in br.
  virtual quant::LayerFormats select(BlockWeights& w, const std::string& prefix, BlockReport& br, int64_t* elems) = 0;
  // --iters 0: its search (or RTN) of the selected Linears; their QDQ values are left in w.
  virtual quant::BlockTuneResult search(const quant::TuneLane& lane, BlockWeights& w,
                                        const quant::LayerFormats& selected, const BlockStats& st) = 0;
  // Whether every block runs search() or a search of the same cost (the start estimate prices it with a
  // probe, pipeline/estimate_search.h): --iters 0, or a search whose result SignRound starts from.
  virtual bool searches_every_block() const = 0;
  // SignRound: called for each tuned Linear once its tunables are made (empty: nothing to fix).
  virtual std::function<void(Context&, quant::TunedLinear&)> tuning_hook(const BlockStats&) { return {}; }
  // Whether the run needs its chain after the last block (lm_head's tuning, the resume state).
  virtual bool reads_chain_after_last_block() const { return false; }
  // The quantized block into its outputs (rank 0 writes).
  virtual void write_block(BlockWeights& w, int64_t layer, quant::BlockTuneResult& tr, BlockReport& br,
                           const BlockStats& st) = 0;
  // A second track's tuning in the block's report (the first one's fills the block's own fields).
  virtual void report_tuning(const quant::BlockTuneResult&, BlockReport&) {}
  // After the last block: the rest of the model, the configs.
  virtual void finish(const TrackFinish& in) = 0;
  // --resume: the outputs the resume state keeps (empty: the track cannot resume).
  virtual std::vector<ResumeOutput> resume_outputs() { return {}; }
  // A track that reads no calibration (a plain round-to-nearest run) writes the whole model by itself,
  // once opened; it returns the written file's path relative to the output directory.
  virtual bool data_free() const { return false; }
  virtual std::string write_data_free() { return ""; }

  // Its quantized-input chain ([samples, T, C] of this process's shard; undefined: the FP chain's start).
  Tensor& x_q() { return x_q_; }

 protected:
  Tensor x_q_;
};

}  // namespace ar
