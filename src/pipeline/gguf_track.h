// A GGUF preset's track (scheme_track.h; --format gguf:<preset>, docs/gguf.md): the block's Linears
// whose preset type has scales are quantized; --iters 0 is AutoRound's search for each type
// (quant/gguf_search.h, imatrix-weighted when there is one, round-to-nearest with --disable_opt_rtn);
// SignRound tunes V only, the type's scales and mins fixed by that search first (AutoRound's `_dq`
// wrapper, quant/qdq_fixed.h), so the tuned weights are exactly what the file holds. Its chain starts
// from the embeddings in their preset type, as AutoRound re-caches block 0's quantized inputs when it
// quantizes the embeddings. GgufOutput writes the file as the run goes; with fake in the list, an
// OutputSet writes the file's dequantized tensors. A plain round-to-nearest run reads no calibration.
#pragma once
#include <map>
#include <memory>

#include "pipeline/gguf_output.h"
#include "pipeline/outputs.h"
#include "pipeline/scheme_track.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_scheme.h"

namespace ar {

class GgufTrack : public SchemeTrack {
 public:
  GgufTrack(const TrackEnv& env, quant::GgufScheme scheme, bool with_fake, bool subdir)
      : env_(env), scheme_(std::move(scheme)), with_fake_(with_fake), subdir_(subdir) {}
  const quant::GgufScheme& scheme() const { return scheme_; }
  std::string label() const override { return "gguf:" + scheme_.preset; }
  std::string phase_prefix() const override { return "gguf_"; }
  const quant::QuantFormat& format() const override { return env_.opt.fmt; }  // replaced per Linear
  bool wants_imatrix() const override { return !env_.opt.disable_opt_rtn; }
  // --iters 0 searches each block; a tuned block's scales are fixed by the same search (fix_params).
  bool searches_every_block() const override { return true; }
  std::string summary_line() const override;
  void open(const std::string& dir) override;
  void embeddings(const Tensor& emb, const std::function<void(const Tensor&, Tensor&)>& embed) override;
  quant::LayerFormats select(BlockWeights& w, const std::string& prefix, BlockReport& br, int64_t* elems) override;
  quant::BlockTuneResult search(const quant::TuneLane& lane, BlockWeights& w, const quant::LayerFormats& selected,
                                const BlockStats& st) override;
  std::function<void(Context&, quant::TunedLinear&)> tuning_hook(const BlockStats& st) override;
  void write_block(BlockWeights& w, int64_t layer, quant::BlockTuneResult& tr, BlockReport& br,
                   const BlockStats& st) override;
  void report_tuning(const quant::BlockTuneResult& tr, BlockReport& br) override;
  void finish(const TrackFinish& in) override;
  bool data_free() const override { return env_.opt.tune.iters == 0 && env_.opt.disable_opt_rtn; }
  std::string write_data_free() override;

 private:
  void add(const std::string& name, const Tensor& t);
  void fix_params(Context& c, quant::TunedLinear& L, const Imatrix* imat);
  quant::GgufLayerParams layer_params(Context& c, const std::string& short_name, const Tensor& W, const Imatrix* imat);
  std::map<std::string, int> write_tensors(BlockWeights& w, const std::string& prefix, const quant::BlockTuneResult& tr);

  TrackEnv env_;
  quant::GgufScheme scheme_;
  bool with_fake_, subdir_;
  std::string dir_;  // the run's output directory
  std::unique_ptr<GgufOutput> file_;
  std::unique_ptr<OutputSet> fake_;  // gguf:<preset>,fake: the file's dequantized tensors
  std::string prefix_;                                    // the block being quantized
  std::map<std::string, quant::GgufLayerParams> params_;  // its tuned Linears' fixed parameters
};

}  // namespace ar
