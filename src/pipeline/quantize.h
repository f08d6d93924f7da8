// The quantization run, block by block (autoround-spec.md §1.5):
//   calibration tokens -> embeddings = x_fp for block 0 (cached once)
//   for each block: load (mmap -> fp32) ; y_fp = Block_fp(x_fp) ; tune on x_in = x_q (or x_fp) ;
//                   x_q = Block_q(x_in) ; x_fp = y_fp ; pack and stream the block to the output
//   non-block tensors copied unchanged; config.json + quantization_config; tokenizer files copied;
//   the output directory appears atomically when everything is written.
// Layer rules (AutoRound's): Linears whose out or in is not a multiple of 32 stay in 16 bit (listed
// in extra_config); --fp_layers substrings stay in 16 bit; lm_head only with quant_lm_head (tuned as one
// Linear on the final-normed q-chain output, quant/tune_linear.h) and never when tied to the embeddings.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallel/plan.h"
#include "pipeline/layer_config.h"
#include "quant/calib.h"
#include "quant/signround.h"

namespace ar {
namespace dist {
class Job;
}

struct QuantizeOptions {
  std::string model_dir, output_dir;
  // auto_round | auto_gptq | auto_awq | fake, or several comma-separated: one tuning, one output each
  // (pipeline/outputs.h: subdirectories of output_dir named as AutoRound names them).
  std::string format = "auto_round";
  quant::QuantFormat fmt;
  bool group_size_given = false;  // --group_size on the command line: never adapted to the model
  quant::SignRoundOptions tune;
  quant::CalibOptions calib;
  bool quanted_input = true;
  bool disable_opt_rtn = false;
  bool quant_lm_head = false;  // tune and pack lm_head too (never when tied to the embeddings)  // --iters 0: plain RTN instead of the imatrix-weighted scale search
  std::vector<std::string> fp_layers;
  // --layer_config: per-Linear bits, group size and sym (pipeline/layer_config.h); bound to the
  // model's Linear names by QuantizeRun::plan.
  LayerConfig layer_config;
  bool overwrite = false;
  bool resume = false;  // keep state in <output_dir>.partial after every block and continue from it
  int threads = 0;
  parallel::ParallelSetting parallel;  // --parallel_quantization
  std::string devices;                 // --devices (empty: every visible device)
  int cuda_device = -1;                // --device cuda:N: SignRound on that GPU (pipeline/gpu_tuner.h)
  std::string report_path;  // optional JSON report
  double progress_interval_s = 10;  // without a terminal: a progress line this often during a block
  bool verbose = false;             // per-block phase timings in the log
  // --amp: bf16 GEMM operands with fp32 accumulation in the block passes and the tuning, calibration
  // activations stored in bf16 (quant::SignRoundOptions::amp). Unset: on where the CPU has bf16 dot
  // products (cpu::bf16_gemm_supported), off elsewhere. tune.amp is set from it by quantize_model.
  std::optional<bool> amp;
};

// Resolves QuantizeOptions::amp on this CPU: whether amp runs, and the log line that says why.
// Refuses --amp true where the CPU has no bf16 GEMMs (Unsupported).
struct AmpChoice {
  bool on = false;
  std::string line;
};
AmpChoice choose_amp(const std::optional<bool>& requested);

struct BlockReport {
  int64_t index = 0;
  double loss_first = 0, loss_best = 0, seconds = 0, peak_rss_mb = 0;
  int best_iter = -1;
  std::vector<std::string> quantized, kept_fp;
  std::map<std::string, std::string> own_formats;  // quantized Linears of a --layer_config format ("W8G128 sym")
  std::map<std::string, double> phase_seconds;  // fp_forward, tune, tune_<lane phase>, q_forward, pack_write
  int world_collect = 1, world_search = 1, world_tune = 1;
  int64_t exchange_bytes = 0;  // read by one rank from the others over the whole tuning
  // A MoE block: calibration tokens routed to each expert by the FP block (the whole pool).
  std::vector<int64_t> expert_tokens;
  // The GGUF preset's own tuning when int formats are written too (--format auto_round,gguf:q4_k_m).
  struct Tuning {
    double loss_first = 0, loss_best = 0;
    int best_iter = -1;
  };
  std::optional<Tuning> gguf;
  // Multi-process job: per process (rank order) its phase seconds, exchange bytes and peak RSS.
  std::vector<std::map<std::string, double>> ranks;
};

struct QuantizeReport {
  std::vector<BlockReport> blocks;
  std::vector<std::string> notes;
  int64_t nsamples = 0, seqlen = 0;
  int processes = 1;  // of a multi-process job
  double seconds = 0, peak_rss_mb = 0;
  bool lm_head_quantized = false;
  double lm_head_loss_first = 0, lm_head_loss_best = 0, lm_head_seconds = 0;
};

// job: this process's multi-process job (distributed/job.h), nullptr for a single process.
QuantizeReport quantize_model(const QuantizeOptions& opt, dist::Job* job = nullptr);

}  // namespace ar
