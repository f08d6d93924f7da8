// Interrupted runs leave nothing behind: SIGINT, SIGTERM and SIGHUP remove every registered temporary
// output (resumable ones are kept and named) and end the process with 128 + signal.
//
// The CLI calls install_interrupt_cleanup() first thing in main(). The handler only writes the signal
// number into a pipe (async-signal-safe, whichever thread the kernel picks: libraries such as OpenBLAS
// start threads before main, so blocking the signals there cannot cover every thread); a watcher thread
// reads it and does the cleanup in ordinary code. The registry of temporary paths and the pipe are the
// process-wide mutable objects besides the log sink, because signals are process-wide; library code that
// never installs the watcher (tests, benches) only pays for a mutex.
#pragma once
#include <functional>
#include <string>

namespace ar {

// Installs the SIGINT/SIGTERM/SIGHUP handlers (except for a signal ignored at start, as under nohup: it
// stays ignored) and starts the watcher. Idempotent.
void install_interrupt_cleanup();

// While alive, `path` (a file or directory) is removed if the process is interrupted; with keep=true it
// is kept and named on stderr instead (resume state).
class TempRegistration {
 public:
  TempRegistration() = default;
  TempRegistration(const std::string& path, bool keep) { assign(path, keep); }
  ~TempRegistration() { release(); }
  TempRegistration(const TempRegistration&) = delete;
  TempRegistration& operator=(const TempRegistration&) = delete;
  void assign(const std::string& path, bool keep);  // registers (or re-registers) `path`
  void release();  // no longer temporary (committed or removed by its owner)

 private:
  long id_ = -1;
};

// Ends the process from any thread as an interrupt would (a lost peer of a multi-process job): prints
// `message`, removes the registered temporary outputs (kept ones are named) and exits with `code`.
[[noreturn]] void exit_with_cleanup(const std::string& message, int code);

// Runs `f` while no interrupt cleanup can run: a commit's renames are seen by cleanup either not yet
// started or finished, never half done.
void without_interrupt_cleanup(const std::function<void()>& f);

}  // namespace ar
