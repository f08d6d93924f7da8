// What a user watching a long quantization sees (issue 11, item 2):
// - during a block, after every iteration: block, iteration, current and best loss, block ETA and run
//   ETA. On a terminal one line updated in place; otherwise (log file, nohup, batch job) a line every
//   `interval_s` seconds, so minutes never pass in silence;
// - at the end, a summary table: per block the first and best loss, best iteration and time; totals
//   and peak memory.
// With a log observer (core/log.h: the Python module) the block starts and iterations go to it instead.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ar {

struct BlockReport;

class Progress {
 public:
  using Clock = std::chrono::steady_clock;
  // `tty`: stderr is a terminal (in-place updates); `interval_s`: seconds between lines otherwise.
  // Blocks [first_block, blocks) run in this process (a resumed run starts later).
  Progress(int64_t blocks, int64_t first_block, bool tty, double interval_s);
  void start_block(int64_t b);  // 0-based
  // After iteration `it` (1-based) of `iters`.
  void iteration(int it, int iters, double loss, double best);
  void end_block();  // clears the in-place line

 private:
  int64_t blocks_, first_, block_ = 0;
  Clock::time_point run_start_, block_start_, last_line_;
  bool tty_;
  double interval_s_;
};

// The end-of-run table, one line per block plus totals (each line without a trailing newline).
std::vector<std::string> summary_table(const std::vector<BlockReport>& blocks, double seconds, double peak_rss_mb);

}  // namespace ar
