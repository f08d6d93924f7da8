#include "pipeline/weight_track.h"

#include <cstdio>

#include "pipeline/float_export.h"
#include "quant/opt_rtn_fp.h"
#include "quant/qdq_fp.h"

namespace ar {

std::string WeightTrack::label() const {
  const quant::QuantFormat& f = env_.opt.fmt;
  if (f.is_float()) return float_scheme_name(f);
  char s[48];
  std::snprintf(s, sizeof s, "W%dG%lld", f.bits, static_cast<long long>(f.group_size));
  return s;
}

// The imatrix feeds --iters 0's optimized RTN: the symmetric int search below 8 bits, the float
// families that have one.
bool WeightTrack::wants_imatrix() const {
  const QuantizeOptions& o = env_.opt;
  if (o.tune.iters > 0 || o.disable_opt_rtn) return false;
  if (has_opt_rtn(o.fmt)) return true;
  for (const auto& e : o.layer_config.entries())  // a Linear of its own format may have the search
    if (!e.keeps_fp() && has_opt_rtn(e.format(o.fmt))) return true;
  return false;
}

void WeightTrack::open(const std::string& dir) {
  outputs_ = std::make_unique<OutputSet>(env_.opt, dir, kOutputShardBytes, env_.model);
  if (env_.opt.resume) outputs_->keep_files();
}

void WeightTrack::embeddings(const Tensor&, const std::function<void(const Tensor&, Tensor&)>&) {
  if (env_.root) outputs_->copy_tensor(env_.model, "model.embed_tokens.weight", env_.ctx);
}

quant::LayerFormats WeightTrack::select(BlockWeights& w, const std::string& prefix, BlockReport& br, int64_t* elems) {
  return steps::plan_block_layers(w, prefix, rules_, br, elems);
}

quant::BlockTuneResult WeightTrack::search(const quant::TuneLane& lane, BlockWeights& w,
                                           const quant::LayerFormats& selected, const BlockStats& st) {
  return rtn_block(env_.ctx, lane, w, selected, st.imatrix);
}

// FP8_STATIC: each tuned Linear starts from its input's maximum (coefficient 1).
std::function<void(Context&, quant::TunedLinear&)> WeightTrack::tuning_hook(const BlockStats& st) {
  if (!env_.opt.fmt.act_static()) return {};
  const ActMax* amax = st.act_max;
  return [amax](Context&, quant::TunedLinear& L) { L.act_max = amax->at(linear_input_key(L.name)); };
}

void WeightTrack::write_block(BlockWeights& w, int64_t layer, quant::BlockTuneResult& tr, BlockReport& br,
                              const BlockStats& st) {
  if (env_.opt.fmt.act_static() && env_.opt.tune.iters == 0)  // SignRound set the tuned ones
    for (auto& L : tr.layers) L.input_scale = quant::fp8_static_input_scale(st.act_max->at(linear_input_key(L.name)));
  if (env_.root) steps::write_block(env_.ctx, env_.model, layer, w, tr, br, *outputs_);
}

void WeightTrack::finish(const TrackFinish& in) {
  if (!env_.root) return;
  outputs_->copy_tensor(env_.model, "model.norm.weight", env_.ctx);
  outputs_->copy_foreign(env_.ctx);
  const ModelConfig& cfg = env_.model.config();
  for (int64_t l = cfg.num_layers; l < cfg.num_layers + cfg.mtp_layers; ++l)  // MTP layers: unchanged
    for (const std::string& name : env_.model.stored_names(HfModel::layer_prefix(l)))
      outputs_->copy_tensor(env_.model, name, env_.ctx);
  if (lm_head_q_) {
    steps::tune_lm_head(env_.ctx, env_.model, env_.opt, in.x_fp, x_q_, in.seqlen, in.loss_mask, *outputs_,
                        env_.rep);
  } else if (env_.model.has("lm_head.weight")) {
    outputs_->copy_tensor(env_.model, "lm_head.weight", env_.ctx);
  }
  outputs_->finish(env_.opt, in.seqlen, lm_head_q_);
}

}  // namespace ar
