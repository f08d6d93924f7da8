// The int and float weight schemes' track (scheme_track.h): AutoRound's layer rules choose the Linears,
// --iters 0 is RTN or the optimized-RTN search of the QuantFormat's family (block_passes.h rtn_block),
// SignRound tunes them with no parameters fixed, and OutputSet writes them in every listed format
// (auto_round, auto_gptq, auto_awq, llm_compressor, fake). With static activation scales (FP8_STATIC)
// it asks for the activation maxima, hands them to SignRound (which tunes a coefficient of each, with
// the activations fake-quantized in the tuning forward) and writes the scales beside the weights. It keeps the resume state's
// outputs, and tunes lm_head after the last block with --quant_lm_head.
#pragma once
#include <memory>

#include "pipeline/outputs.h"
#include "pipeline/run_steps.h"
#include "pipeline/scheme_track.h"

namespace ar {

class WeightTrack : public SchemeTrack {
 public:
  WeightTrack(const TrackEnv& env, const LayerRules& rules, bool lm_head_q)
      : env_(env), rules_(rules), lm_head_q_(lm_head_q) {}
  std::string label() const override;
  std::string phase_prefix() const override { return ""; }
  const quant::QuantFormat& format() const override { return env_.opt.fmt; }
  bool searches_every_block() const override { return env_.opt.tune.iters == 0; }
  bool wants_imatrix() const override;
  bool wants_act_max() const override { return env_.opt.fmt.act_static(); }
  bool follows_layer_rules() const override { return true; }
  void open(const std::string& dir) override;
  void embeddings(const Tensor& emb, const std::function<void(const Tensor&, Tensor&)>& embed) override;
  quant::LayerFormats select(BlockWeights& w, const std::string& prefix, BlockReport& br, int64_t* elems) override;
  quant::BlockTuneResult search(const quant::TuneLane& lane, BlockWeights& w, const quant::LayerFormats& selected,
                                const BlockStats& st) override;
  std::function<void(Context&, quant::TunedLinear&)> tuning_hook(const BlockStats& st) override;
  bool reads_chain_after_last_block() const override { return lm_head_q_ || env_.opt.resume; }
  void write_block(BlockWeights& w, int64_t layer, quant::BlockTuneResult& tr, BlockReport& br,
                   const BlockStats& st) override;
  void finish(const TrackFinish& in) override;
  std::vector<ResumeOutput> resume_outputs() override { return outputs_->resume_outputs(); }

 private:
  TrackEnv env_;
  LayerRules rules_;
  bool lm_head_q_;
  std::unique_ptr<OutputSet> outputs_;  // rank 0
};

}  // namespace ar
