// QuantizeRun's per-block passes over its scheme tracks (scheme_track.h): the block loaded once, the
// FP pass (targets, and the statistics the tracks ask for), then each track in turn: its Linears
// chosen, tuned or searched, its quantized-input chain carried to the next block, the block written;
// the resume state after the block.
#include <array>
#include <cstdio>
#include <iterator>
#include <map>

#include "core/log.h"
#include "pipeline/quantize_run.h"
#include "pipeline/run_steps.h"
#include "pipeline/shard_stream.h"

namespace ar {

namespace {
bool any_of(const std::vector<std::unique_ptr<SchemeTrack>>& tracks, bool (SchemeTrack::*wants)() const) {
  for (const auto& t : tracks)
    if (((*t).*wants)()) return true;
  return false;
}
}  // namespace

// A track's activation maxima are read on its own chain when it tunes on one (AutoRound collects them
// with the quantized input), else in the FP pass.
bool QuantizeRun::act_max_on_chain(SchemeTrack& t) const {
  return opt_.tune.iters > 0 && opt_.quanted_input && t.x_q().defined();
}

void QuantizeRun::block(int64_t b) {
  const auto t0 = Clock::now();
  dims_ = model_->config().block_dims(b);
  cache_per_sample_ = block_cache_floats(dims_) * T_;
  const std::string prefix = HfModel::layer_prefix(b);
  BlockWeights w = model_->load_block(b, *ctx_);
  for (auto& [nm, t] : quant::block_linears(w)) steps::check_finite(*t, prefix + nm + ".weight");
  for (const BlockTensor& t : w.tensors)
    if (t.role == TensorRole::Norm) steps::check_finite(t.in(w), prefix + t.name);
  const auto t_fp = Clock::now();
  const int64_t rows = shard_.samples();
  quant::TuneLane collect = lanes_->lane(parallel::Phase::Collect, rows,
                                         parallel::price_mirror(int64_t(w.bytes() / 4), 0, 0, cache_per_sample_, kPassSamples).total());
  collect.procs = procs_;
  BlockAux<float> aux = block_aux(b);
  Imatrix imat;
  ActMax amax;
  bool fp_amax = false;
  for (const auto& t : tracks_) fp_amax |= t->wants_act_max() && !act_max_on_chain(*t);
  const bool want_imat = any_of(tracks_, &SchemeTrack::wants_imatrix);
  BlockReport br;
  br.index = b;
  if (gpu_ && !want_imat && !fp_amax)
    gpu_->forward_all(*ctx_, dims_, w, aux, x_fp_, y_fp_, rows, bs_, gpu_amp_);
  else
    block_forward_all(*ctx_, collect, dims_, w, aux, x_fp_, y_fp_, rows, kPassSamples, opt_.tune.amp,
                      {want_imat ? &imat : nullptr, fp_amax ? &amax : nullptr, &br.expert_tokens});
  steps::check_finite(y_fp_, "block " + std::to_string(b) + " (" + prefix + ") FP output");
  const BlockStats fp_stats{want_imat ? &imat : nullptr, fp_amax ? &amax : nullptr};
  if (dims_.is_moe()) steps::log_routing(br, model_->config().num_layers);
  br.world_collect = (collect.parallel() ? collect.world : 1) * processes();
  br.phase_seconds["fp_forward"] = seconds_since(t_fp);
  if (progress_) progress_->start_block(b);
  quant::BlockTuneResult tr;
  for (track_index_ = 0; track_index_ < tracks(); ++track_index_) {
    if (track_index_ > 0) w = model_->load_block(b, *ctx_);  // the first tuning left its QDQ values in w
    quant::BlockTuneResult r = track(*tracks_[size_t(track_index_)], w, b, fp_stats, br);
    if (track_index_ == 0) tr = std::move(r);
  }
  track_index_ = 0;
  if (progress_) progress_->end_block();
  std::swap(x_fp_, y_fp_);
  br.seconds = seconds_since(t0);
  br.peak_rss_mb = peak_rss_mb();
  if (procs_) gather_rank_metrics(br);
  steps::log_block(br, model_->config().num_layers, tr, opt_.tune.iters > 0 && opt_.verbose);
  rep_.blocks.push_back(std::move(br));
  if (opt_.resume) save_resume(b + 1);
}

// One track's quantization of the block: its layers chosen, tuned or searched, the next block's
// quantized input computed on its own chain, the block written to its outputs. The first track
// reports into br; a later one into its own phases (its phase_prefix) and fields, and a log line.
quant::BlockTuneResult QuantizeRun::track(SchemeTrack& t, BlockWeights& w, int64_t b, const BlockStats& fp_stats,
                                          BlockReport& br) {
  const bool first = track_index_ == 0;
  const std::string prefix = HfModel::layer_prefix(b), tag = first ? "" : t.phase_prefix();
  const int64_t rows = shard_.samples();
  BlockAux<float> aux = block_aux(b);
  auto collect_lane = [&] {
    quant::TuneLane l = lanes_->lane(parallel::Phase::Collect, rows,
                                     parallel::price_mirror(int64_t(w.bytes() / 4), 0, 0, cache_per_sample_, kPassSamples).total());
    l.procs = procs_;
    return l;
  };
  BlockStats st{t.wants_imatrix() ? fp_stats.imatrix : nullptr, t.wants_act_max() ? fp_stats.act_max : nullptr};
  ActMax chain_max;
  if (t.wants_act_max() && act_max_on_chain(t)) {  // the FP block over this track's chain; statistics only
    if (!tmp_.defined() || tmp_.shape() != t.x_q().shape()) tmp_ = Tensor::empty(t.x_q().shape(), t.x_q().dtype(), *ctx_);
    block_forward_all(*ctx_, collect_lane(), dims_, w, aux, t.x_q(), tmp_, rows, kPassSamples, opt_.tune.amp,
                      {nullptr, &chain_max});
    st.act_max = &chain_max;
  }
  int64_t tuned_elems = 0;
  const quant::LayerFormats selected = t.select(w, prefix, br, &tuned_elems);
  const auto t_tune = Clock::now();
  quant::BlockTuneResult tr = tune_or_search(t, w, b, selected, tuned_elems, st, br);
  const auto t_q = Clock::now();
  br.phase_seconds[tag + "tune"] = std::chrono::duration<double>(t_q - t_tune).count();
  if (first) steps::record_tuning(tr, br);
  else t.report_tuning(tr, br);
  // The quantized chain is the next block's tuning input (RTN needs none); after the last block only
  // what the track reads of it (lm_head's tuning, the resume state).
  const bool q_read = b + 1 < model_->config().num_layers || t.reads_chain_after_last_block();
  if (opt_.quanted_input && opt_.tune.iters > 0 && q_read) {
    Tensor& xq = t.x_q();
    const Tensor& x_in = xq.defined() ? xq : x_fp_;
    if (!xq.defined()) xq = Tensor::empty({rows, T_, C_}, act_dtype_, *ctx_);
    tmp_ = x_in.clone(*ctx_);
    const ActQdq<float> act = block_act_qdq(tr, w);  // FP8_STATIC: the activations as the block was tuned
    if (gpu_ && !t.format().act_static())
      gpu_->forward_all(*ctx_, dims_, w, aux, tmp_, xq, rows, bs_, gpu_amp_);
    else
      block_forward_all(*ctx_, collect_lane(), dims_, w, aux, tmp_, xq, rows, kPassSamples, opt_.tune.amp, {},
                        t.format().act_static() ? &act : nullptr);  // per sample
    steps::check_finite(xq, "block " + std::to_string(b) + " (" + prefix + ") quantized output");
  }
  const auto t_pack = Clock::now();
  br.phase_seconds[tag + "q_forward"] = std::chrono::duration<double>(t_pack - t_q).count();
  t.write_block(w, b, tr, br, st);
  br.phase_seconds[tag + "pack_write"] = seconds_since(t_pack);
  if (!first && opt_.tune.iters > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "block %lld/%lld %s: loss %.6g -> %.6g at iter %d", (long long)(b + 1),
                  (long long)model_->config().num_layers, t.label().c_str(), tr.loss_first, tr.loss_best, tr.best_iter);
    log_info(line);
  }
  return tr;
}

quant::BlockTuneResult QuantizeRun::tune_or_search(SchemeTrack& t, BlockWeights& w, int64_t b,
                                                   const quant::LayerFormats& selected,
                                                   int64_t tuned_elems, const BlockStats& st, BlockReport& br) {
  const int64_t block_elems = int64_t(w.bytes() / 4);
  quant::TuneLane lane;
  if (opt_.tune.iters == 0) {
    lane = lanes_->lane(parallel::Phase::Search, int64_t(selected.size()),
                        parallel::price_mirror(block_elems, 0, 0, 0, 0).total());
  } else {
    lane = lanes_->lane(parallel::Phase::Tune, B_ / processes(),
                        parallel::price_mirror(block_elems, tuned_elems, opt_.tune.deterministic ? int(levels_) : 1,
                                               cache_per_sample_, opt_.tune.deterministic ? 1 : bs_)
                            .total());
  }
  (opt_.tune.iters == 0 ? br.world_search : br.world_tune) = (lane.parallel() ? lane.world : 1) * processes();
  lane.procs = procs_;
  lane.sample_base = shard_.sample_begin;
  lane.pool = n_;
  if (opt_.tune.iters == 0) return t.search(lane, w, selected, st);
  quant::SignRoundOptions tune = opt_.tune;
  tune.fix_params = t.tuning_hook(st);
  if (progress_)  // one block's tunings count as one run of iterations
    tune.progress = [this](int it, int iters, double loss, double best) {
      progress_->iteration(track_index_ * iters + it, tracks() * iters, loss, best);
    };
  const Tensor& x_in = (opt_.quanted_input && t.x_q().defined()) ? t.x_q() : x_fp_;
  BlockAux<float> aux = block_aux(b);
  if (gpu_) {
    tune.amp = gpu_amp_;
    return gpu_->tune(*ctx_, dims_, w, t.format(), aux, x_in, y_fp_, loss_mask_, tune, &selected);
  }
  return quant::signround_tune_block(*ctx_, dims_, w, t.format(), aux, x_in, y_fp_, loss_mask_, tune, lane, &selected);
}

// Every process's phase seconds, exchange bytes and peak RSS of this block, for the report.
void QuantizeRun::gather_rank_metrics(BlockReport& br) {
  static const char* kKeys[] = {"fp_forward", "tune", "q_forward", "tune_forward", "tune_backward", "tune_exchange"};
  constexpr size_t kN = std::size(kKeys) + 2;
  std::array<double, kN> mine{};
  for (size_t k = 0; k < std::size(kKeys); ++k)
    mine[k] = br.phase_seconds.count(kKeys[k]) ? br.phase_seconds.at(kKeys[k]) : 0.0;
  mine[kN - 2] = double(br.exchange_bytes);
  mine[kN - 1] = br.peak_rss_mb;
  std::vector<double> all(kN * size_t(processes()));
  procs_->allgather(mine.data(), sizeof mine, all.data());
  for (int q = 0; q < processes(); ++q) {
    std::map<std::string, double> m;
    for (size_t k = 0; k < std::size(kKeys); ++k) m[kKeys[k]] = all[size_t(q) * kN + k];
    m["exchange_bytes"] = all[size_t(q) * kN + kN - 2];
    m["peak_rss_mb"] = all[size_t(q) * kN + kN - 1];
    br.ranks.push_back(std::move(m));
  }
}

// Rank 0 writes the state; in a multi-process job it streams every process's shards into it.
void QuantizeRun::save_resume(int64_t next_block) {
  const Tensor& x_q = resumable().x_q();
  if (!job_) {
    keeper_->save(next_block, x_fp_, x_q, resumable().resume_outputs());
    out_->keep();
    return;
  }
  ShardStream fp(*procs_, shard_bytes()), q(*procs_, shard_bytes());
  if (!root()) {
    fp.send(x_fp_);
    if (x_q.defined()) q.send(x_q);
    return;
  }
  const ActSource src_fp = fp.gather(x_fp_);
  const ActSource src_q = x_q.defined() ? q.gather(x_q) : ActSource{};
  keeper_->save(next_block, src_fp, x_q.defined() ? &src_q : nullptr, resumable().resume_outputs());
  out_->keep();
}

}  // namespace ar
