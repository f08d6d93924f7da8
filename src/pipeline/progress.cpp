#include "pipeline/progress.h"

#include <cstdio>

#include "core/log.h"
#include "pipeline/quantize.h"

namespace ar {

namespace {
std::string duration(double s) {
  char b[32];
  if (s < 0 || s != s) return "?";
  if (s < 90) std::snprintf(b, sizeof b, "%.0f s", s);
  else if (s < 5400) std::snprintf(b, sizeof b, "%.0f min", s / 60);
  else std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  return b;
}
}  // namespace

Progress::Progress(int64_t blocks, int64_t first_block, bool tty, double interval_s)
    : blocks_(blocks), first_(first_block), run_start_(Clock::now()), block_start_(run_start_), last_line_(run_start_),
      tty_(tty), interval_s_(interval_s) {}

void Progress::start_block(int64_t b) {
  block_ = b;
  block_start_ = Clock::now();
  report_progress({b, blocks_, 0, 0, 0, 0});  // a host program's observer (core/log.h) sees the block start
}

void Progress::iteration(int it, int iters, double loss, double best) {
  if (report_progress({block_, blocks_, it, iters, loss, best})) return;  // the observer shows it
  const auto now = Clock::now();
  if (!tty_ && std::chrono::duration<double>(now - last_line_).count() < interval_s_ && it != iters) return;
  last_line_ = now;
  const double in_block = std::chrono::duration<double>(now - block_start_).count();
  const double frac = double(it) / double(iters);
  const double block_eta = in_block / frac * (1 - frac);
  // Run ETA: time spent on this process's blocks over their done fraction (blocks are alike in size).
  const double done = double(block_) + frac, here = double(block_ - first_) + frac;
  const double run_eta = std::chrono::duration<double>(now - run_start_).count() / here * (double(blocks_) - done);
  char line[256];
  std::snprintf(line, sizeof line, "block %lld/%lld iter %d/%d loss %.4g best %.4g, block ETA %s, run ETA %s",
                (long long)(block_ + 1), (long long)blocks_, it, iters, loss, best, duration(block_eta).c_str(),
                duration(run_eta).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r[%5.1f%%] %s   ", 100.0 * done / double(blocks_), line);
    std::fflush(stderr);
  } else if (it != iters) {  // the block's own summary line follows the last iteration
    log_info(line);
  }
}

void Progress::end_block() {
  if (tty_ && !has_log_observer()) std::fprintf(stderr, "\r%120s\r", "");
}

std::vector<std::string> summary_table(const std::vector<BlockReport>& blocks, double seconds, double peak_rss_mb) {
  std::vector<std::string> lines = {"block | loss first | loss best | best iter | seconds",
                                    "------+------------+-----------+-----------+--------"};
  double tuned = 0;
  char b[160];
  for (const auto& r : blocks) {
    std::snprintf(b, sizeof b, "%5lld | %10.4g | %9.4g | %9d | %7.1f", (long long)(r.index + 1), r.loss_first,
                  r.loss_best, r.best_iter, r.seconds);
    lines.push_back(b);
    tuned += r.seconds;
  }
  std::snprintf(b, sizeof b, "total: %zu blocks in %.1f s (%.1f s in blocks), peak RSS %.0f MiB", blocks.size(),
                seconds, tuned, peak_rss_mb);
  lines.push_back(b);
  return lines;
}

}  // namespace ar
