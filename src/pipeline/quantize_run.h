// The quantization run's object, internal to the pipeline (the entry point is quantize_model,
// pipeline/quantize.h): its stages and per-block tracks are in quantize.cpp, the GGUF output's steps
// in quantize_gguf.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "dist/job.h"
#include "io/atomic_file.h"
#include "model/loader.h"
#include "model/rope_table.h"
#include "model/tokenizer/tokenizer.h"
#include "parallel/plan.h"
#include "pipeline/block_passes.h"
#include "pipeline/gguf_output.h"
#include "pipeline/lane_planner.h"
#include "pipeline/outputs.h"
#include "pipeline/progress.h"
#include "pipeline/quantize.h"
#include "pipeline/resume_state.h"
#include "pipeline/run_summary.h"
#include "quant/calib.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_scheme.h"
#include "quant/signround.h"

namespace ar {

class QuantizeRun {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kShardBytes = 5ull << 30;  // <= 5 GB per shard, as AutoRound writes
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
  QuantizeRun(const QuantizeOptions& requested, dist::Job* job)
      : requested_(requested), job_(job), procs_(job ? &job->link() : nullptr) {}
  QuantizeReport run();

 private:
  bool root() const { return !job_ || job_->rank() == 0; }
  int processes() const { return job_ ? job_->size() : 1; }
  void plan();
  void calibrate();
  void check_process_split() const;
  void summary_head();
  void summary_tail();
  void start();
  bool restore();
  void block(int64_t b);
  quant::BlockTuneResult track(BlockWeights& w, int64_t b, const Imatrix* imat, BlockReport& br);
  Tensor& x_q() { return gguf_active_ ? gguf_x_q_ : x_q_; }
  int tracks() const { return int(int_track_) + int(gguf_scheme_.has_value()); }
  quant::BlockTuneResult tune_or_search(BlockWeights& w, const std::set<std::string>& selected, int64_t tuned_elems,
                                        const Imatrix* imat, BlockReport& br);
  void save_resume(int64_t next_block);
  void gather_rank_metrics(BlockReport& br);
  void finish();
  void gguf_run();
  void gguf_open();
  void gguf_embeddings(const Tensor& emb);
  std::set<std::string> gguf_tuned_layers(BlockWeights& w, const std::string& prefix, int64_t* tuned_elems);
  void gguf_fix_params(Context& c, quant::TunedLinear& L);
  quant::BlockTuneResult gguf_search_block(BlockWeights& w, const std::set<std::string>& selected);
  quant::GgufLayerParams gguf_layer_params(Context& c, const std::string& short_name, const Tensor& W);
  std::map<std::string, int> gguf_write_block(BlockWeights& w, const std::string& prefix,
                                              const quant::BlockTuneResult& tr);
  void gguf_finish_file();
  void gguf_add(Context& c, const std::string& name, const Tensor& t);
  std::vector<size_t> shard_bytes() const;

  const QuantizeOptions& requested_;
  dist::Job* job_;
  parallel::ProcessLink* procs_;
  Clock::time_point t_start_ = Clock::now();
  QuantizeOptions opt_;
  AmpChoice amp_;
  DType act_dtype_ = DType::F32;
  std::unique_ptr<HfModel> model_;
  std::unique_ptr<Tokenizer> tok_;
  QuantizeReport rep_;
  bool lm_head_q_ = false;
  LayerRules rules_;
  std::string report_path_;
  std::optional<AtomicDir> out_;           // rank 0
  std::unique_ptr<OutputSet> outputs_;     // rank 0
  std::unique_ptr<ResumeKeeper> keeper_;   // rank 0 with --resume
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<LanePlanner> lanes_;
  std::unique_ptr<Progress> progress_;     // rank 0
  // The run's quantizations (outputs.h FormatPlan), each tuned once per block on its own quantized-
  // input chain: the int formats' (outputs_, x_q_) and a GGUF preset's (gguf_, gguf_x_q_).
  bool int_track_ = true;
  bool gguf_active_ = false;                      // the GGUF track is the one running (x_q(), tune_or_search)
  int track_index_ = 0;                           // of the running track in this block (progress)
  std::optional<quant::GgufScheme> gguf_scheme_;  // --format gguf:<preset>
  std::unique_ptr<GgufOutput> gguf_;
  std::unique_ptr<OutputSet> gguf_fake_;  // --format gguf:<preset>,fake: the file's dequantized tensors
  std::string gguf_prefix_;                                    // the block being tuned
  std::map<std::string, quant::GgufLayerParams> gguf_params_;  // its tuned Linears' fixed parameters
  const Imatrix* gguf_imat_ = nullptr;                         // its imatrix (null: data-free searches)
  ActMax act_max_;  // QuantFormat::act_static: the running block's activation maxima
  quant::CalibData calib_;
  nlohmann::ordered_json fingerprint_;  // with --resume or in a job: run_identity (options, model files, calibration)
  int64_t n_ = 0, T_ = 0, C_ = 0, B_ = 0, bs_ = 0, levels_ = 1, cache_per_sample_ = 0, start_block_ = 0;
  parallel::ProcessShard shard_;           // this process's samples (the whole pool when serial)
  BlockDims dims_;
  RopeTable rope_;
  std::vector<int32_t> pos_;
  std::vector<uint8_t> loss_mask_;         // the whole pool's [n * T]
  Tensor x_fp_, y_fp_, x_q_, gguf_x_q_, tmp_;  // this process's shard: [samples, T, C]
};

}  // namespace ar
