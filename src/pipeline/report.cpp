#include "pipeline/report.h"

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/mapped_file.h"

#include <filesystem>

namespace ar {

void write_report(const QuantizeOptions& opt, const QuantizeReport& rep, const std::string& path) {
  nlohmann::ordered_json r;
  r["generator"] = "autoround.cpp";  // lets --overwrite replace this file (is_report_file)
  r["bits"] = opt.fmt.bits;
  r["group_size"] = opt.fmt.group_size;
  r["sym"] = opt.fmt.sym;
  r["iters"] = opt.tune.iters;
  r["lr"] = opt.tune.lr;
  r["nsamples"] = rep.nsamples;
  r["seqlen"] = rep.seqlen;
  r["seconds"] = rep.seconds;
  r["peak_rss_mb"] = rep.peak_rss_mb;
  r["notes"] = rep.notes;
  if (rep.lm_head_quantized)
    r["lm_head"] = {{"loss_first", rep.lm_head_loss_first}, {"loss_best", rep.lm_head_loss_best},
                    {"seconds", rep.lm_head_seconds}};
  r["parallel_quantization"] = opt.parallel.str();
  r["deterministic"] = opt.tune.deterministic;
  r["processes"] = rep.processes;
  for (const auto& b : rep.blocks) {
    r["blocks"].push_back({{"block", b.index}, {"loss_first", b.loss_first}, {"loss_best", b.loss_best},
                           {"best_iter", b.best_iter}, {"seconds", b.seconds}, {"phase_seconds", b.phase_seconds},
                           {"peak_rss_mb", b.peak_rss_mb},
                           {"world", {{"collect", b.world_collect}, {"search", b.world_search}, {"tune", b.world_tune}}},
                           {"exchange_bytes", b.exchange_bytes},
                           {"quantized", b.quantized}, {"kept_fp", b.kept_fp}});
    if (!b.own_formats.empty()) r["blocks"].back()["own_formats"] = b.own_formats;  // --layer_config
    if (!b.expert_tokens.empty()) r["blocks"].back()["expert_tokens"] = b.expert_tokens;
    if (!b.ranks.empty()) r["blocks"].back()["ranks"] = b.ranks;  // per process: phases, bytes, memory
    if (b.gguf)
      r["blocks"].back()["gguf"] = {{"loss_first", b.gguf->loss_first}, {"loss_best", b.gguf->loss_best},
                                    {"best_iter", b.gguf->best_iter}};
  }
  write_file_atomic(path, r.dump(2) + "\n");
}

bool is_report_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) > (64u << 20) || ec) return false;
  const auto j = nlohmann::json::parse(read_text_file(path), nullptr, false);
  return j.is_object() && j.contains("generator") && j["generator"] == "autoround.cpp";
}

}  // namespace ar
