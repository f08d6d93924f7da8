// Logging: the only globals in the project are the log sink's level, tag (set once by the CLI) and
// observer (set by a host program around one run, e.g. the Python module: python/).
#pragma once
#include <cstdint>
#include <string>

namespace ar {
enum class LogLevel { Debug, Info, Warn, Error, Quiet };
void set_log_level(LogLevel l);
void set_log_tag(const std::string& tag);  // "rank 1": every line names its process ("" = none)
void log(LogLevel l, const std::string& msg);
inline void log_info(const std::string& m) { log(LogLevel::Info, m); }
inline void log_warn(const std::string& m) { log(LogLevel::Warn, m); }
// A command's result line ("quantized 8 blocks in ...", "wrote DIR"): to the observer at Info, else
// to stderr as a plain line, whatever the level (--quiet keeps it).
void log_result(const std::string& msg);

// A quantization's progress: a block starts (iter 0) or one of its iterations ends.
struct ProgressEvent {
  int64_t block = 0, blocks = 0;  // 0-based block, block count
  int iter = 0, iters = 0;
  double loss = 0, best = 0;
};

// What a host program sees instead of stderr: every log line at or above the level, and the progress.
// Both may be called from any thread that logs. progress() may throw to stop the run (a cancelled
// run unwinds like a failed one: its temporary output is removed).
class LogObserver {
 public:
  virtual ~LogObserver() = default;
  virtual void line(LogLevel level, const std::string& msg) = 0;
  virtual void progress(const ProgressEvent& e) = 0;
};

// nullptr (the default): lines go to stderr and progress is the caller's to print.
void set_log_observer(LogObserver* o);
// Hands `e` to the observer; false when there is none.
bool report_progress(const ProgressEvent& e);
bool has_log_observer();
}  // namespace ar
