// The quantization run's object, internal to the pipeline (the entry point is quantize_model,
// pipeline/quantize.h): its stages in quantize.cpp, the per-block passes over its scheme tracks
// (scheme_track.h) in quantize_block.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "distributed/job.h"
#include "io/atomic_file.h"
#include "model/loader.h"
#include "model/rope_table.h"
#include "model/tokenizer/tokenizer.h"
#include "parallel/plan.h"
#include "pipeline/block_passes.h"
#include "pipeline/gpu_tuner.h"
#include "pipeline/lane_planner.h"
#include "pipeline/outputs.h"
#include "pipeline/progress.h"
#include "pipeline/quantize.h"
#include "pipeline/resume_state.h"
#include "pipeline/scheme_track.h"
#include "pipeline/run_summary.h"
#include "quant/calib.h"
#include "quant/signround.h"

namespace ar {

class QuantizeRun {
 public:
  using Clock = std::chrono::steady_clock;
  // The block passes (FP targets, q-chain) run one sample at a time: a sample's activations fit the
  // allocator's cache, so the passes reuse their buffers instead of faulting in fresh pages per
  // micro-batch (8 samples of 512 tokens of a 1B block need ~1.2 GB of activations); the GEMMs keep
  // >= 256 rows per unit either way.
  static constexpr int64_t kPassSamples = 1;
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
  QuantizeRun(const QuantizeOptions& requested, dist::Job* job)
      : requested_(requested), job_(job), procs_(job ? &job->link() : nullptr) {}
  QuantizeReport run();

 private:
  bool root() const { return !job_ || job_->rank() == 0; }
  int processes() const { return job_ ? job_->size() : 1; }
  int tracks() const { return int(tracks_.size()); }
  void plan();
  void plan_tracks(const FormatPlan& formats);
  void calibrate();
  void check_process_split() const;
  void summary_head();
  void summary_tail();
  std::string estimate_line();
  void start();
  bool restore();
  void block(int64_t b);
  bool act_max_on_chain(SchemeTrack& t) const;
  quant::BlockTuneResult track(SchemeTrack& t, BlockWeights& w, int64_t b, const BlockStats& fp_stats, BlockReport& br);
  quant::BlockTuneResult tune_or_search(SchemeTrack& t, BlockWeights& w, int64_t b, const quant::LayerFormats& selected,
                                        int64_t tuned_elems, const BlockStats& st, BlockReport& br);
  // Block b's positions and RoPE tables (batch 1, T_ tokens).
  BlockAux<float> block_aux(int64_t b) const {
    const RopeTable& r = rope_.layer(b);
    return {1, T_, pos_.data(), r.cos.data(), r.sin.data(), nullptr};
  }
  void save_resume(int64_t next_block);
  void gather_rank_metrics(BlockReport& br);
  void finish();
  void run_data_free();
  std::vector<size_t> shard_bytes() const;
  // The track whose outputs and chain the resume state keeps (the run's only track when it resumes).
  SchemeTrack& resumable() { return *tracks_.front(); }

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
  std::unique_ptr<ResumeKeeper> keeper_;   // rank 0 with --resume
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<LanePlanner> lanes_;
  std::unique_ptr<GpuTuner> gpu_;          // --device cuda:N
  bool gpu_amp_ = false;                   // its tuning's --amp (the CPU passes run fp32 then)
  std::unique_ptr<Progress> progress_;     // rank 0
  // The run's quantizations (scheme_track.h), in --format order of their families, each tuned once per
  // block on its own quantized-input chain.
  std::vector<std::unique_ptr<SchemeTrack>> tracks_;
  int track_index_ = 0;  // of the running track in this block (progress)
  quant::CalibData calib_;
  nlohmann::ordered_json fingerprint_;  // with --resume or in a job: run_identity (options, model files, calibration)
  int64_t n_ = 0, T_ = 0, C_ = 0, B_ = 0, bs_ = 0, levels_ = 1, cache_per_sample_ = 0, start_block_ = 0;
  parallel::ProcessShard shard_;           // this process's samples (the whole pool when serial)
  BlockDims dims_;
  RopeTables rope_;  // per layer kind (the sliding layers' own RoPE: ModelConfig::sliding_rope)
  std::vector<int32_t> pos_;
  std::vector<uint8_t> loss_mask_;         // the whole pool's [n * T]
  Tensor x_fp_, y_fp_, tmp_;               // this process's shard: [samples, T, C]
};

}  // namespace ar
