// The quantization run as named stages shared by every lane: serial, in-process data-parallel and
// multi-process runs are this one code path (docs/ARCHITECTURE.md, docs/distributed.md).
//   plan       options resolved against the model and the CPU; the scheme tracks (scheme_track.h);
//              the output checked (rank 0)
//   calibrate  the calibration tokens (every process builds them all), the handshake, this process's
//              shard of the pool, the start summary
//   start      the resume state restored, or the embeddings of this process's samples
//   per block  collect (FP targets, the tracks' statistics), then per track: tune or search, its
//              q-chain, pack (rank 0); the resume state (quantize_block.cpp)
//   finish     each track's rest of the model (final norm, lm_head) and configs, the outputs
//              committed, the summary and the report
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
#include "distributed/job.h"
#include "export/gguf_model.h"
#include "io/atomic_file.h"
#include "kernels/cpu/bf16_ops.h"
#include "model/linear_specs.h"
#include "model/rope_table.h"
#include "model/tokenizer/tokenizer.h"
#include "parallel/plan.h"
#include "pipeline/block_passes.h"
#include "pipeline/export_format.h"
#include "pipeline/float_export.h"
#include "pipeline/gguf_track.h"
#include "pipeline/job_identity.h"
#include "pipeline/lane_planner.h"
#include "pipeline/option_limits.h"
#include "pipeline/progress.h"
#include "pipeline/report.h"
#include "pipeline/resume_state.h"
#include "pipeline/run_estimate.h"
#include "pipeline/run_steps.h"
#include "pipeline/shard_stream.h"
#include "pipeline/weight_track.h"

namespace ar {

namespace {
// A quantized checkpoint is quantized again only from FP8 weights with dynamic activations (DeepSeek-V3,
// Kimi K2 and Qwen3 FP8 releases; compressed-tensors FP8 weight-only): every Linear is read
// dequantized exactly (E4M3 code x its tile's fp32 multiplier, in fp32), as AutoRound dequantizes
// them first (it rounds to bf16). gpt-oss's MXFP4 experts are read the same way (AutoRound loads them
// with Mxfp4Config(dequantize=True)). Packed integer and other 4-bit float weights are refused.
void check_quantized_source(const QuantConfig& q, const std::string& dir) {
  if (q.mxfp4_experts)
    log_info("the model's MXFP4 experts are dequantized exactly (every value fits bf16) and quantized from there; "
             "its 16-bit tensors are read as stored");
  if (!q.present) return;
  if (q.fp != FloatQuant::Fp8 || q.act_static)
    fail(ErrorKind::InvalidInput, dir + ": the model is already quantized (only FP8 weights with dynamic activations "
                                  "are read as a source, dequantized)");
  log_info("the model's FP8 weights (" +
           (q.block_rows > 0 ? std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols) + " tiles"
                             : std::string("per-channel or per-tensor scales")) +
           ") are dequantized exactly to fp32 and quantized from there; its 16-bit tensors are read as stored");
}

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

void QuantizeRun::plan() {
  validate_quantize_options(requested_);  // counts and rates in range (option_limits.h)
  const bool on_gpu = requested_.cuda_device >= 0;
  // On a GPU amp is on unless --amp false, as AutoRound runs there (every CUDA GPU since sm_80 has bf16
  // GEMMs): the tuning and the block passes on the GPU; a pass left on the CPU (one that gathers
  // statistics) runs fp32, whatever the CPU's bf16 support.
  gpu_amp_ = on_gpu && requested_.amp.value_or(true);
  amp_ = !on_gpu   ? choose_amp(requested_.amp)
         : gpu_amp_ ? AmpChoice{false, "amp: on for the tuning and the block passes on the GPU (bf16 GEMM operands; "
                                       "--amp false for fp32)"}
                    : AmpChoice{false, "amp: off (--amp false): fp32 on the GPU and the CPU"};
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
  check_quantized_source(cfg.quant, opt_.model_dir);
  if (on_gpu) {  // refused or opened before any work and before the output exists
    check_gpu_run(requested_, cfg, processes());
    gpu_ = GpuTuner::open(opt_.cuda_device);
  }
  tok_ = load_tokenizer(*model_);  // ids checked against vocab_size
  steps::read_user_names(opt_, model_->names());
  steps::bind_layer_config(opt_, cfg, rep_);
  steps::check_fp_layers(opt_, cfg, rep_);
  const FormatPlan formats = plan_formats(opt_);
  if (!formats.int_formats.empty() && !opt_.fmt.is_float())
    steps::adapt_group_size(opt_, cfg, rep_);  // float and GGUF groups are their types'
  lm_head_q_ = steps::decide_lm_head(opt_, *model_, rep_);
  if (lm_head_q_ && processes() > 1)
    fail(ErrorKind::Unsupported, "--quant_lm_head is not supported in a multi-process job yet (lm_head is tuned on "
                                 "the whole calibration pool); run it with one process");
  rules_ = LayerRules::of(opt_);
  ctx_ = std::make_unique<Context>(Device{}, opt_.threads);
  plan_tracks(formats);
  if (!root()) return;  // only rank 0 writes: only its output is checked and created
  out_.emplace(steps::output_spec(opt_, &report_path_));  // checked, temporary created: before any work
  if (!out_->note().empty()) steps::note(rep_, out_->note());
}

// One track per family of the format list: the weight formats' (int or float), then a GGUF preset's.
void QuantizeRun::plan_tracks(const FormatPlan& formats) {
  const TrackEnv env{*ctx_, *model_, opt_, rep_, root()};
  if (!formats.int_formats.empty()) tracks_.push_back(std::make_unique<WeightTrack>(env, rules_, lm_head_q_));
  if (formats.gguf.empty()) return;
  const std::string& f = formats.gguf;
  if (opt_.resume || processes() > 1)
    fail(ErrorKind::Unsupported, "--format " + f + ": --resume and multi-process jobs are not supported for GGUF "
                                 "outputs yet");
  quant::GgufScheme scheme = quant::parse_gguf_scheme(f);
  gguf_architecture(model_->config());  // an architecture (or MoE layout) llama.cpp cannot run: refused now
  if (scheme.preset == "q2_k_mixed" && opt_.tune.iters > 0) {  // as AutoRound does for dense models
    steps::note(rep_, "gguf:q2_k_mixed is a recipe for --iters 0 (tuned, it serves mixture-of-experts models); "
                      "falling back to gguf:q2_k_s");
    scheme = quant::parse_gguf_scheme("gguf:q2_k_s");
  }
  if (!tracks_.empty() && opt_.tune.iters > 0) {
    std::string ints;
    for (const auto& i : formats.int_formats) ints += (ints.empty() ? "" : ", ") + i;
    steps::note(rep_, ints + " and " + f + " hold different quantized values: each block is tuned twice (once for "
                      "each), on one load of the block, one calibration and one FP pass");
  }
  tracks_.push_back(std::make_unique<GgufTrack>(env, std::move(scheme), formats.gguf_fake, formats.several));
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
  if (cfg.dense_limit > 0 && cfg.dense_limit < cfg.max_position_embeddings) {  // sliding window, sparse attention
    if (calib_opt.seqlen_given) check_dense_limit(cfg, calib_opt.seqlen, "--seqlen");
    calib_opt.max_context = cfg.dense_limit;
    calib_opt.context_field = cfg.dense_limit_field + ", beyond which attention is not dense";
  }
  calib_opt.vocab_size = cfg.vocab_size;
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
  for (int64_t l = 0; l < cfg.num_layers; ++l)  // a block's forward cache per sample, the largest block's
    cache_per_sample_ = std::max(cache_per_sample_, T_ * block_cache_floats(cfg.block_dims(l)));
  rope_ = make_rope_tables(cfg, T_);
  pos_.resize(size_t(n_ * T_));
  for (int64_t i = 0; i < n_ * T_; ++i) pos_[size_t(i)] = int32_t(i % T_);
  loss_mask_.assign(size_t(n_ * T_), 1);
  for (int64_t s = 0; s < n_; ++s) loss_mask_[size_t(s * T_ + T_ - 1)] = 0;  // the last position never counts
}

void QuantizeRun::summary_head() {
  bool layer_rules = false;  // run_summary's "quantizing ..." / layer lines describe a track
  for (const auto& t : tracks_) layer_rules |= t->follows_layer_rules();
  const double process_bytes = current_rss_mb() * 1048576.0;  // libraries, tokenizer, calibration tokens
  for (const auto& line : run_summary(model_->config(), opt_, n_, T_, lm_head_q_, process_bytes)) {
    if (!layer_rules && (line.rfind("quantizing ", 0) == 0 || line.rfind("quantized Linears", 0) == 0 ||
                         line.rfind("kept in 16 bit", 0) == 0))
      continue;
    log_info(line);
  }
  for (const auto& t : tracks_)
    if (const std::string line = t->summary_line(); !line.empty()) log_info(line);
  log_info(cpu::isa_summary());
  log_info(amp_.line);
  if (gpu_)
    log_info("tuning and block passes on " + gpu_->describe() +
             "; calibration, searches and packing on the CPU");
  if (job_)
    log_info("processes: " + std::to_string(processes()) + ", this one (rank " + std::to_string(job_->rank()) +
             ") holds samples [" + std::to_string(shard_.sample_begin) + ", " + std::to_string(shard_.sample_end) +
             ") for batch positions [" + std::to_string(shard_.pos_begin) + ", " + std::to_string(shard_.pos_end) + ")");
}

// The lane's plan for the main phase and the time estimate (after a restore: the blocks left).
void QuantizeRun::summary_tail() {
  const ModelConfig& cfg = model_->config();
  const int64_t params = max_block_params(cfg);
  int64_t linears = 0;  // the search's items: the largest block's Linears
  for (int64_t l = 0; l < cfg.num_layers; ++l) linears = std::max(linears, int64_t(block_linear_specs(cfg, l).size()));
  const int64_t tune_items = B_ / processes();  // this process's batch positions
  log_info(opt_.tune.iters > 0
               ? lanes_->plan_line(parallel::Phase::Tune, tune_items,
                                   parallel::price_mirror(params, params, opt_.tune.deterministic ? int(levels_) : 1,
                                                          cache_per_sample_, opt_.tune.deterministic ? 1 : bs_)
                                       .total())
               : lanes_->plan_line(parallel::Phase::Search, linears, parallel::price_mirror(params, 0, 0, 0, 0).total()));
  log_info(estimate_line());
}

// A SignRound run in one process is priced by a measured leaf, one of its blocks on its first samples,
// tuned where the run tunes (the CPU, or the GPU of --device cuda:N); other runs by FLOPs
// (pipeline/run_estimate.h). In a multi-process job the ranks would measure at once on shared cores, and
// a long leaf on one would hold the others at their next collective. Searches (--iters 0, GGUF's scales)
// are priced by a short probe of the same block on the CPU, where they run (pipeline/estimate_search.h).
std::string QuantizeRun::estimate_line() {
  const ModelConfig& cfg = model_->config();
  const RunWork work = run_work(cfg, opt_, n_, T_, cfg.num_layers - start_block_, tracks());
  const MachineRates rates = measure_rates(*ctx_, cfg, opt_.tune.amp);
  if (start_block_ >= cfg.num_layers) return time_estimate_line(work, rates, opt_.tune.amp, StartProbes{});
  // The measured block is of the kind most of the remaining layers are (with a tie, MoE): the few dense
  // layers of a MoE model (Qwen3-MoE's mlp_only_layers) are priced as its MoE ones.
  int64_t moe_layers = 0, pick = start_block_;
  for (int64_t l = start_block_; l < cfg.num_layers; ++l) moe_layers += cfg.is_moe_layer(l);
  const bool moe = 2 * moe_layers >= cfg.num_layers - start_block_;
  while (cfg.is_moe_layer(pick) != moe) ++pick;
  const BlockDims d = cfg.block_dims(pick);
  BlockWeights block = model_->load_block(pick, *ctx_);
  const BlockAux<float> aux = block_aux(pick);
  StartProbes probes;
  probes.search = price_searches(*ctx_, tracks_, block, d, pick, cfg.num_layers - start_block_, processes());
  if (!gpu_)  // a GPU runs the passes where no track asks for statistics; their FLOP price stands there
    probes.pass_sample_s = measure_pass(*ctx_, d, block, aux, x_fp_, opt_.tune.amp,
                               std::any_of(tracks_.begin(), tracks_.end(), [](const auto& t) { return t->wants_imatrix(); }));
  if (job_ || !leaf_worthwhile(work, d)) return time_estimate_line(work, rates, opt_.tune.amp, probes);
  LeafTuner on_gpu;
  quant::SignRoundOptions tune = opt_.tune;
  if (gpu_) {
    tune.amp = gpu_amp_;
    on_gpu = [&](BlockWeights& w, const quant::SignRoundOptions& o, const Tensor& x, const std::vector<uint8_t>& mask) {
      gpu_->tune(*ctx_, d, w, opt_.fmt, aux, x, x, mask, o, {});
    };
  }
  const LeafTimes leaf = measure_leaf(*ctx_, d, std::move(block), opt_.fmt, tune, aux, x_fp_,
                                      leaf_samples(int64_t(work.batch)), on_gpu);
  return time_estimate_line(work, leaf, pick, probes);
}

std::vector<size_t> QuantizeRun::shard_bytes() const {
  std::vector<size_t> b;
  for (int q = 0; q < processes(); ++q)
    b.push_back(size_t(parallel::process_shard(n_, B_, q, processes()).samples() * T_ * C_) * dtype_size(act_dtype_));
  return b;
}

// Rank 0 validates and reads the state; the other processes receive their shards of it.
bool QuantizeRun::restore() {
  Tensor& x_q = resumable().x_q();
  if (!job_) {
    start_block_ = keeper_->restore(x_fp_, x_q, resumable().resume_outputs(), *ctx_);
    return start_block_ > 0;
  }
  std::optional<ResumeState> st;
  if (root()) st = keeper_->load(resumable().resume_outputs());
  int64_t head[2] = {st ? st->next_block : 0, st && !st->x_q.empty()};  // next block, x_q saved
  procs_->broadcast(head, sizeof head, 0);
  start_block_ = head[0];
  if (start_block_ == 0) return false;
  ShardStream stream(*procs_, shard_bytes());
  if (head[1]) x_q = Tensor::empty(x_fp_.shape(), x_fp_.dtype(), *ctx_);
  for (Tensor* t : {&x_fp_, &x_q}) {
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
  if (root()) keeper_->restore_outputs(*st, resumable().resume_outputs());
  return true;
}

void QuantizeRun::start() {
  lanes_ = std::make_unique<LanePlanner>(opt_, ctx_->device(), shard_.samples(), rep_.notes);
  if (root()) {
    for (auto& t : tracks_) t->open(out_->tmp());
    if (const size_t outputs = resumable().resume_outputs().size(); outputs > 0)
      keeper_ = std::make_unique<ResumeKeeper>(
          out_->tmp(), ResumeExpect{fingerprint_, model_->config().num_layers, outputs, steps::resume_tensor_check(*model_)});
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
    const int32_t* ids = calib_.ids.data() + shard_.sample_begin * T_;
    const double es = model_->config().embed_scale;
    const float scale = es > 0 ? float(es) : 1.f;
    steps::embed(*ctx_, emb, ids, x_fp_, rows, T_, C_, scale);
    auto embed = [&](const Tensor& table, Tensor& x) {  // a track's chain from its own embedding table
      x = Tensor::empty(x_fp_.shape(), act_dtype_, *ctx_);
      steps::embed(*ctx_, table, ids, x, rows, T_, C_, scale);
    };
    for (auto& t : tracks_) t->embeddings(emb, embed);
  }
  ctx_->allocator().trim();  // the embeddings' fp32 copies (vocab x hidden) would stay cached all run
  summary_tail();
  if (root())
    progress_ = std::make_unique<Progress>(model_->config().num_layers, start_block_, isatty(STDERR_FILENO) != 0,
                                           opt_.progress_interval_s);
}

void QuantizeRun::finish() {
  if (procs_) procs_->sum_tree(1.0);  // a barrier: every process finished its blocks before rank 0 publishes
  ctx_->allocator().trim();  // the blocks' cached buffers, before lm_head's vocab x hidden copies
  for (auto& t : tracks_) t->finish(TrackFinish{x_fp_, calib_.seqlen, loss_mask_});
  if (keeper_ && opt_.resume) keeper_->discard();  // the resume state is not part of the output
  if (root()) out_->commit();
  rep_.seconds = seconds_since(t_start_);
  rep_.peak_rss_mb = peak_rss_mb();
  for (const auto& line : summary_table(rep_.blocks, rep_.seconds, rep_.peak_rss_mb)) log_info(line);
  if (root() && !report_path_.empty()) write_report(opt_, rep_, report_path_);
}

// The only track writes the whole model without calibration data.
void QuantizeRun::run_data_free() {
  SchemeTrack& t = *tracks_.front();
  t.open(out_->tmp());
  const std::string file = t.write_data_free();
  out_->commit();
  log_info("wrote " + out_->path() + "/" + file);
  rep_.seconds = seconds_since(t_start_);
  rep_.peak_rss_mb = peak_rss_mb();
  if (!report_path_.empty()) write_report(opt_, rep_, report_path_);
}

QuantizeReport QuantizeRun::run() {
  plan();
  if (tracks() == 1 && tracks_.front()->data_free()) {  // a plain round-to-nearest track: no calibration
    run_data_free();
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
