// The quantization run as named stages shared by every lane: serial, in-process data-parallel and
// multi-process runs are this one code path (docs/ARCHITECTURE.md, docs/distributed.md).
//   plan       options resolved against the model and the CPU; the output checked (rank 0)
//   calibrate  the calibration tokens (every process builds them all), the handshake, this process's
//              shard of the pool, the start summary
//   start      the resume state restored, or the embeddings of this process's samples
//   per block  collect (FP targets, imatrix), tune or search, the q-chain, pack (rank 0), resume state
//   finish     final norm and lm_head, the outputs committed, the summary and the report
// In a multi-process job every process tunes the same block on its shard; the tuned weights are the
// same bits everywhere (one tree-summed gradient per iteration), so rank 0 alone packs and writes.
#include "pipeline/quantize.h"
#include "pipeline/quantize_run.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "dist/job.h"
#include "io/atomic_file.h"
#include "kernels/cpu/bf16_ops.h"
#include "model/rope_table.h"
#include "model/tokenizer/tokenizer.h"
#include "parallel/plan.h"
#include "pipeline/block_passes.h"
#include "pipeline/export_format.h"
#include "pipeline/float_export.h"
#include "pipeline/gguf_output.h"
#include "pipeline/job_identity.h"
#include "pipeline/lane_planner.h"
#include "pipeline/option_limits.h"
#include "pipeline/progress.h"
#include "pipeline/report.h"
#include "pipeline/resume_state.h"
#include "pipeline/run_estimate.h"
#include "pipeline/run_steps.h"
#include "pipeline/shard_stream.h"
#include "quant/opt_rtn_fp.h"

namespace ar {

namespace {
constexpr int64_t kBlockLinears = 7;          // q, k, v, o, gate, up, down: the search's items at most
// The block passes (FP targets, q-chain) run one sample at a time: a sample's activations fit the
// allocator's cache, so the passes reuse their buffers instead of faulting in fresh pages per
// micro-batch (8 samples of 512 tokens of a 1B block need ~1.2 GB of activations); the GEMMs keep
// >= 256 rows per unit either way.
constexpr int64_t kPassSamples = 1;

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
}  // namespace


void QuantizeRun::plan() {
  validate_quantize_options(requested_);  // counts and rates in range (option_limits.h)
  amp_ = choose_amp(requested_.amp);
  opt_ = requested_;
  opt_.tune.amp = amp_.on;
  act_dtype_ = amp_.on ? DType::BF16 : DType::F32;  // calibration activations
  parse_formats(opt_);  // known, not repeated, writable with these bits
  if (opt_.fmt.is_float())
    check_float_scheme(opt_);
  else
    quant::make_qdq_shape(1, 32, opt_.fmt.bits, opt_.fmt.group_size, opt_.fmt.sym);  // validates bits and group size
  model_ = HfModel::open(opt_.model_dir);
  const ModelConfig& cfg = model_->config();
  if (cfg.quant.present) fail(ErrorKind::InvalidInput, opt_.model_dir + ": the model is already quantized");
  tok_ = load_tokenizer(*model_);  // ids checked against vocab_size
  const FormatPlan formats = plan_formats(opt_);
  int_track_ = !formats.int_formats.empty();
  if (int_track_ && !opt_.fmt.is_float()) steps::adapt_group_size(opt_, cfg, rep_);  // float and GGUF groups are their types'
  lm_head_q_ = steps::decide_lm_head(opt_, *model_, rep_);
  if (lm_head_q_ && processes() > 1)
    fail(ErrorKind::Unsupported, "--quant_lm_head is not supported in a multi-process job yet (lm_head is tuned on "
                                 "the whole calibration pool); run it with one process");
  rules_ = LayerRules::of(opt_);
  if (const std::string& f = formats.gguf; !f.empty()) {
    if (opt_.resume || processes() > 1)
      fail(ErrorKind::Unsupported, "--format " + f + ": --resume and multi-process jobs are not supported for GGUF "
                                   "outputs yet");
    gguf_scheme_ = quant::parse_gguf_scheme(f);
    if (gguf_scheme_->preset == "q2_k_mixed" && opt_.tune.iters > 0) {  // as AutoRound does for dense models
      steps::note(rep_, "gguf:q2_k_mixed is a recipe for --iters 0 (tuned, it serves mixture-of-experts models); "
                        "falling back to gguf:q2_k_s");
      gguf_scheme_ = quant::parse_gguf_scheme("gguf:q2_k_s");
    }
    if (int_track_ && opt_.tune.iters > 0) {
      std::string ints;
      for (const auto& i : formats.int_formats) ints += (ints.empty() ? "" : ", ") + i;
      steps::note(rep_, ints + " and " + f + " hold different quantized values: each block is tuned twice (once for "
                        "each), on one load of the block, one calibration and one FP pass");
    }
  }
  if (!root()) return;  // only rank 0 writes: only its output is checked and created
  out_.emplace(steps::output_spec(opt_, &report_path_));  // checked, temporary created: before any work
  if (!out_->note().empty()) steps::note(rep_, out_->note());
}

// Process p holds the pool samples of its batch positions (parallel/process_link.h): the shards stay
// where they are used for the whole run, so per-process activation memory is ~1/P of serial.
void QuantizeRun::check_process_split() const {
  const int P = processes();
  if (P == 1) return;
  if (P > B_)
    fail(ErrorKind::InvalidInput, "multi-process job of " + std::to_string(P) + " processes: the global batch holds " +
                                      std::to_string(B_) + " samples (each process needs at least one)");
  if (opt_.tune.deterministic && opt_.tune.iters > 0 && (!power_of_two(P) || B_ % P))
    fail(ErrorKind::InvalidInput, "--deterministic true: a multi-process job needs a power-of-two process count "
                                  "dividing the global batch (" + std::to_string(B_) + "), not " + std::to_string(P) +
                                      " (or --deterministic false)");
}

void QuantizeRun::calibrate() {
  const ModelConfig& cfg = model_->config();
  quant::CalibOptions calib_opt = opt_.calib;
  calib_opt.max_context = cfg.max_position_embeddings;
  calib_ = quant::build_calibration(*tok_, calib_opt);
  for (const auto& n : calib_.notes) steps::note(rep_, n);
  rep_.nsamples = calib_.n;
  rep_.processes = processes();
  rep_.seqlen = calib_.seqlen;
  n_ = calib_.n, T_ = calib_.seqlen, C_ = cfg.hidden_size;
  fingerprint_ = steps::run_fingerprint(opt_, calib_, lm_head_q_, processes());
  // The model's files are fingerprinted by content once, for the resume state and the handshake.
  if (opt_.resume || job_) fingerprint_ = run_identity(fingerprint_, opt_.model_dir);
  if (job_) {
    job_->handshake(job_identity(fingerprint_));
    log_info("handshake: " + std::to_string(processes()) + " processes agree on build, options, model and calibration");
  }
  bs_ = std::min<int64_t>(opt_.tune.batch_size, n_);
  B_ = std::min<int64_t>(n_, bs_ * std::max(1, opt_.tune.gradient_accumulate_steps));  // global batch
  check_process_split();
  shard_ = parallel::process_shard(n_, B_, job_ ? job_->rank() : 0, processes());
  levels_ = quant::signround_tree_levels(B_);  // of the deterministic gradient tree
  dims_ = cfg.block_dims();
  cache_per_sample_ = T_ * (8 * C_ + 4 * dims_.I + dims_.H * T_);  // a block's forward cache per sample
  rope_ = make_rope_table(cfg, T_);
  pos_.resize(size_t(n_ * T_));
  for (int64_t i = 0; i < n_ * T_; ++i) pos_[size_t(i)] = int32_t(i % T_);
  loss_mask_.assign(size_t(n_ * T_), 1);
  for (int64_t s = 0; s < n_; ++s) loss_mask_[size_t(s * T_ + T_ - 1)] = 0;  // the last position never counts
}

void QuantizeRun::summary_head() {
  for (const auto& line : run_summary(model_->config(), opt_, n_, T_, lm_head_q_)) {
    if (!int_track_ && (line.rfind("quantizing W", 0) == 0 || line.rfind("quantized Linears", 0) == 0 ||
                         line.rfind("kept in 16 bit", 0) == 0))
      continue;  // the int format's lines; GGUF's types come from the preset (the line below)
    log_info(line);
  }
  if (gguf_scheme_)
    log_info("quantizing to gguf:" + gguf_scheme_->preset + " (llama.cpp's per-tensor types) with " +
             (opt_.tune.iters > 0 ? "SignRound through the GGUF types, " + std::to_string(opt_.tune.iters) + " iterations"
                                  : std::string("AutoRound's imatrix-weighted scale search")));
  log_info(cpu::isa_summary());
  log_info(amp_.line);
  if (job_)
    log_info("processes: " + std::to_string(processes()) + ", this one (rank " + std::to_string(job_->rank()) +
             ") holds samples [" + std::to_string(shard_.sample_begin) + ", " + std::to_string(shard_.sample_end) +
             ") for batch positions [" + std::to_string(shard_.pos_begin) + ", " + std::to_string(shard_.pos_end) + ")");
}

// The lane's plan for the main phase and the time estimate (after a restore: the blocks left).
void QuantizeRun::summary_tail() {
  const ModelConfig& cfg = model_->config();
  const int64_t lin = block_linear_params(cfg);
  const int64_t tune_items = B_ / processes();  // this process's batch positions
  log_info(opt_.tune.iters > 0
               ? lanes_->plan_line(parallel::Phase::Tune, tune_items,
                                   parallel::price_mirror(lin + 2 * C_, lin, opt_.tune.deterministic ? int(levels_) : 1,
                                                          cache_per_sample_, opt_.tune.deterministic ? 1 : bs_)
                                       .total())
               : lanes_->plan_line(parallel::Phase::Search, kBlockLinears,
                                   parallel::price_mirror(lin + 2 * C_, 0, 0, 0, 0).total()));
  log_info(time_estimate_line(run_work(cfg, opt_, n_, T_, cfg.num_layers - start_block_, tracks()),
                              measure_rates(*ctx_, cfg, opt_.tune.amp), opt_.tune.amp));
}

std::vector<size_t> QuantizeRun::shard_bytes() const {
  std::vector<size_t> b;
  for (int q = 0; q < processes(); ++q)
    b.push_back(size_t(parallel::process_shard(n_, B_, q, processes()).samples() * T_ * C_) * dtype_size(act_dtype_));
  return b;
}

// Rank 0 validates and reads the state; the other processes receive their shards of it.
bool QuantizeRun::restore() {
  if (!job_) {
    start_block_ = keeper_->restore(x_fp_, x_q_, outputs_->resume_outputs(), *ctx_);
    return start_block_ > 0;
  }
  std::optional<ResumeState> st;
  if (root()) st = keeper_->load(outputs_->resume_outputs());
  int64_t head[2] = {st ? st->next_block : 0, st && !st->x_q.empty()};  // next block, x_q saved
  procs_->broadcast(head, sizeof head, 0);
  start_block_ = head[0];
  if (start_block_ == 0) return false;
  ShardStream stream(*procs_, shard_bytes());
  if (head[1]) x_q_ = Tensor::empty(x_fp_.shape(), x_fp_.dtype(), *ctx_);
  for (Tensor* t : {&x_fp_, &x_q_}) {
    if (!t->defined()) continue;
    if (!root()) {
      stream.receive(*t);
      continue;
    }
    const bool fp = t == &x_fp_;
    size_t total = 0;
    for (size_t b : shard_bytes()) total += b;
    keeper_->read_act(fp ? st->x_fp : st->x_q, fp ? st->x_fp_hash : st->x_q_hash, total, stream.scatter(*t));
  }
  if (root()) keeper_->restore_outputs(*st, outputs_->resume_outputs());
  return true;
}

void QuantizeRun::start() {
  ctx_ = std::make_unique<Context>(Device{}, opt_.threads);
  lanes_ = std::make_unique<LanePlanner>(opt_, ctx_->device(), shard_.samples(), rep_.notes);
  if (root() && gguf_scheme_) gguf_open();
  if (root() && int_track_) {
    outputs_ = std::make_unique<OutputSet>(opt_, out_->tmp(), kShardBytes);
    if (opt_.resume) outputs_->keep_files();
    keeper_ = std::make_unique<ResumeKeeper>(
        out_->tmp(), ResumeExpect{fingerprint_, model_->config().num_layers, outputs_->size(),
                                  steps::resume_tensor_check(*model_)});
  }
  const int64_t rows = shard_.samples();
  x_fp_ = Tensor::empty({rows, T_, C_}, act_dtype_, *ctx_);
  y_fp_ = Tensor::empty({rows, T_, C_}, act_dtype_, *ctx_);
  if (opt_.resume && restore()) {
    if (root()) out_->keep();
    log_info("resuming " + (root() ? out_->path() : opt_.output_dir) + " after block " + std::to_string(start_block_) +
             "/" + std::to_string(model_->config().num_layers));
    rep_.notes.push_back("resumed after block " + std::to_string(start_block_));
  } else {
    Tensor emb = model_->load_embeddings(*ctx_);
    steps::embed(*ctx_, emb, calib_.ids.data() + shard_.sample_begin * T_, x_fp_, rows, T_, C_);
    if (gguf_) gguf_embeddings(emb);
    if (root() && int_track_) outputs_->copy_tensor(*model_, "model.embed_tokens.weight", *ctx_);
  }
  ctx_->allocator().trim();  // the embeddings' fp32 copies (vocab x hidden) would stay cached all run
  summary_tail();
  if (root())
    progress_ = std::make_unique<Progress>(model_->config().num_layers, start_block_, isatty(STDERR_FILENO) != 0,
                                           opt_.progress_interval_s);
}

quant::BlockTuneResult QuantizeRun::tune_or_search(BlockWeights& w, const std::set<std::string>& selected,
                                                   int64_t tuned_elems, const Imatrix* imat, BlockReport& br) {
  auto quantize_layer = [&](const std::string& short_name) { return selected.count(short_name) > 0; };
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
  gguf_imat_ = imat;
  if (gguf_active_ && opt_.tune.iters == 0) return gguf_search_block(w, selected);
  if (opt_.tune.iters == 0) return rtn_block(*ctx_, lane, w, opt_.fmt, imat, quantize_layer);
  quant::SignRoundOptions tune = opt_.tune;
  if (gguf_active_) tune.fix_params = [this](Context& c, quant::TunedLinear& L) { gguf_fix_params(c, L); };
  if (progress_)  // one block's tunings count as one run of iterations
    tune.progress = [this](int it, int iters, double loss, double best) {
      progress_->iteration(track_index_ * iters + it, tracks() * iters, loss, best);
    };
  const Tensor& x_in = (opt_.quanted_input && x_q().defined()) ? x_q() : x_fp_;
  BlockAux<float> aux{1, T_, pos_.data(), rope_.cos.data(), rope_.sin.data(), nullptr};
  return quant::signround_tune_block(*ctx_, dims_, w, opt_.fmt, aux, x_in, y_fp_, loss_mask_, tune, lane,
                                     quantize_layer);
}

void QuantizeRun::block(int64_t b) {
  const auto t0 = Clock::now();
  const std::string prefix = HfModel::layer_prefix(b);
  BlockWeights w = model_->load_block(b, *ctx_);
  for (auto& [nm, t] : quant::block_linears(w)) steps::check_finite(*t, prefix + nm + ".weight");
  steps::check_finite(w.ln1, prefix + "input_layernorm.weight");
  steps::check_finite(w.ln2, prefix + "post_attention_layernorm.weight");
  const auto t_fp = Clock::now();
  // imatrix: the opt-RTN search, and the GGUF searches (also SignRound's starting scales)
  const bool opt_rtn = (gguf_scheme_ && !opt_.disable_opt_rtn) ||
                       (int_track_ && opt_.tune.iters == 0 && !opt_.disable_opt_rtn &&
                        (opt_.fmt.is_float() ? quant::fp_has_opt_rtn(*opt_.fmt.fp) : opt_.fmt.sym && opt_.fmt.bits < 8));
  const int64_t rows = shard_.samples();
  quant::TuneLane collect = lanes_->lane(parallel::Phase::Collect, rows,
                                         parallel::price_mirror(int64_t(w.bytes() / 4), 0, 0, cache_per_sample_, kPassSamples).total());
  collect.procs = procs_;
  BlockAux<float> aux{1, T_, pos_.data(), rope_.cos.data(), rope_.sin.data(), nullptr};
  Imatrix imat;
  // FP8_STATIC's activation maxima: on the quantized chain when tuning reads it, as AutoRound collects
  // them (its RTN runs without that chain), else here on the FP chain.
  const bool act_on_q = opt_.fmt.act_static() && opt_.tune.iters > 0 && opt_.quanted_input && x_q_.defined();
  act_max_.clear();
  block_forward_all(*ctx_, collect, dims_, w, aux, x_fp_, y_fp_, rows, kPassSamples, opt_.tune.amp, opt_rtn ? &imat : nullptr,
                    opt_.fmt.act_static() && !act_on_q ? &act_max_ : nullptr);
  steps::check_finite(y_fp_, "block " + std::to_string(b) + " (" + prefix + ") FP output");
  if (act_on_q) {  // the FP block over the quantized input; only the statistics are kept
    if (!tmp_.defined() || tmp_.shape() != x_q_.shape()) tmp_ = Tensor::empty(x_q_.shape(), x_q_.dtype(), *ctx_);
    block_forward_all(*ctx_, collect, dims_, w, aux, x_q_, tmp_, rows, kPassSamples, opt_.tune.amp, nullptr, &act_max_);
  }
  BlockReport br;
  br.index = b;
  br.world_collect = (collect.parallel() ? collect.world : 1) * processes();
  br.phase_seconds["fp_forward"] = seconds_since(t_fp);
  if (progress_) progress_->start_block(b);
  quant::BlockTuneResult tr;
  for (track_index_ = 0; track_index_ < tracks(); ++track_index_) {
    gguf_active_ = !int_track_ || track_index_ == 1;
    if (track_index_ > 0) w = model_->load_block(b, *ctx_);  // the first tuning left its QDQ values in w
    quant::BlockTuneResult r = track(w, b, opt_rtn ? &imat : nullptr, br);
    if (track_index_ == 0) tr = std::move(r);
  }
  gguf_active_ = false;
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

// One quantization of the block (the running track): its layers chosen, tuned or searched, the next
// block's quantized input computed on its own chain, the block written to its outputs. The first
// track reports into br; a second one (the GGUF preset beside int formats) into "gguf_" phases and
// br.gguf, and a log line of its own.
quant::BlockTuneResult QuantizeRun::track(BlockWeights& w, int64_t b, const Imatrix* imat, BlockReport& br) {
  const std::string prefix = HfModel::layer_prefix(b), tag = track_index_ > 0 ? "gguf_" : "";
  int64_t tuned_elems = 0;
  const std::set<std::string> selected =
      gguf_active_ ? gguf_tuned_layers(w, prefix, &tuned_elems) : steps::plan_block_layers(w, prefix, rules_, br, &tuned_elems);
  const auto t_tune = Clock::now();
  quant::BlockTuneResult tr = tune_or_search(w, selected, tuned_elems, imat, br);
  if (opt_.fmt.act_static())
    for (auto& L : tr.layers) L.input_scale = quant::fp8_static_input_scale(act_max_.at(linear_input_key(L.name)));
  const auto t_q = Clock::now();
  br.phase_seconds[tag + "tune"] = std::chrono::duration<double>(t_q - t_tune).count();
  if (track_index_ == 0) steps::record_tuning(tr, br);
  else br.gguf = {tr.loss_first, tr.loss_best, tr.best_iter};
  // The quantized chain is the next block's tuning input (RTN needs none); after the last block only
  // lm_head's tuning and the resume state read the int formats' chain.
  const bool q_read = b + 1 < model_->config().num_layers || (!gguf_active_ && (lm_head_q_ || opt_.resume));
  if (opt_.quanted_input && opt_.tune.iters > 0 && q_read) {
    const int64_t rows = shard_.samples();
    Tensor& xq = x_q();
    const Tensor& x_in = xq.defined() ? xq : x_fp_;
    if (!xq.defined()) xq = Tensor::empty({rows, T_, C_}, act_dtype_, *ctx_);
    tmp_ = x_in.clone(*ctx_);
    quant::TuneLane collect = lanes_->lane(parallel::Phase::Collect, rows,
                                           parallel::price_mirror(int64_t(w.bytes() / 4), 0, 0, cache_per_sample_, kPassSamples).total());
    BlockAux<float> aux{1, T_, pos_.data(), rope_.cos.data(), rope_.sin.data(), nullptr};
    block_forward_all(*ctx_, collect, dims_, w, aux, tmp_, xq, rows, kPassSamples, opt_.tune.amp);  // per sample
    steps::check_finite(xq, "block " + std::to_string(b) + " (" + prefix + ") quantized output");
  }
  const auto t_pack = Clock::now();
  br.phase_seconds[tag + "q_forward"] = std::chrono::duration<double>(t_pack - t_q).count();
  if (gguf_active_) gguf_write_block(w, prefix, tr);
  else if (root()) steps::write_block(*ctx_, *model_, prefix, tr, br, *outputs_);
  br.phase_seconds[tag + "pack_write"] = seconds_since(t_pack);
  if (track_index_ > 0 && opt_.tune.iters > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "block %lld/%lld gguf:%s: loss %.6g -> %.6g at iter %d", (long long)(b + 1),
                  (long long)model_->config().num_layers, gguf_scheme_->preset.c_str(), tr.loss_first, tr.loss_best,
                  tr.best_iter);
    log_info(line);
  }
  return tr;
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
  if (!job_) {
    keeper_->save(next_block, x_fp_, x_q_, outputs_->resume_outputs());
    out_->keep();
    return;
  }
  ShardStream fp(*procs_, shard_bytes()), q(*procs_, shard_bytes());
  if (!root()) {
    fp.send(x_fp_);
    if (x_q_.defined()) q.send(x_q_);
    return;
  }
  const ActSource src_fp = fp.gather(x_fp_);
  const ActSource src_q = x_q_.defined() ? q.gather(x_q_) : ActSource{};
  keeper_->save(next_block, src_fp, x_q_.defined() ? &src_q : nullptr, outputs_->resume_outputs());
  out_->keep();
}

void QuantizeRun::finish() {
  if (procs_) procs_->sum_tree(1.0);  // a barrier: every process finished its blocks before rank 0 publishes
  ctx_->allocator().trim();  // the blocks' cached buffers, before lm_head's vocab x hidden copies
  if (gguf_) gguf_finish_file();
  if (root() && int_track_) {
    outputs_->copy_tensor(*model_, "model.norm.weight", *ctx_);
    if (lm_head_q_) {
      steps::tune_lm_head(*ctx_, *model_, opt_, x_fp_, x_q_, T_, loss_mask_, *outputs_, rep_);
    } else if (model_->has("lm_head.weight")) {
      outputs_->copy_tensor(*model_, "lm_head.weight", *ctx_);
    }
    outputs_->finish(opt_, calib_.seqlen, lm_head_q_);
    if (opt_.resume) keeper_->discard();  // the resume state is not part of the output
  }
  if (root()) out_->commit();
  rep_.seconds = seconds_since(t_start_);
  rep_.peak_rss_mb = peak_rss_mb();
  for (const auto& line : summary_table(rep_.blocks, rep_.seconds, rep_.peak_rss_mb)) log_info(line);
  if (root() && !report_path_.empty()) write_report(opt_, rep_, report_path_);
}

QuantizeReport QuantizeRun::run() {
  plan();
  if (gguf_scheme_ && !int_track_ && opt_.tune.iters == 0 && opt_.disable_opt_rtn) {  // plain RTN: no calibration
    gguf_run();
    return std::move(rep_);
  }
  calibrate();
  summary_head();
  start();
  for (int64_t b = start_block_; b < model_->config().num_layers; ++b) block(b);
  finish();
  return std::move(rep_);
}
AmpChoice choose_amp(const std::optional<bool>& requested) {
  const bool can = cpu::bf16_gemm_supported();
  const std::string why = cpu::bf16_support_summary();
  if (requested == false) return {false, "amp: off (--amp false): fp32 GEMMs"};
  if (!can && requested == true) fail(ErrorKind::Unsupported, "--amp true: " + why);
  if (!can) return {false, "amp: off (" + why + "): fp32 GEMMs"};
  return {true, std::string("amp: on (") + (requested ? "--amp true" : "default where the CPU has bf16 dot products") +
                    "; " + why + "): bf16 GEMM operands with fp32 accumulation, bf16 calibration activations"};
}

QuantizeReport quantize_model(const QuantizeOptions& opt, dist::Job* job) { return QuantizeRun(opt, job).run(); }

}  // namespace ar
