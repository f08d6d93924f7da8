// autoround CLI entry: process setup, then the command line (cli/app.h); maps errors to exit codes. The
// only place that exits.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/app.h"
#include "core/error.h"
#include "core/float_mode.h"
#include "core/interrupt.h"
#include "core/malloc_policy.h"
#include "core/printable.h"
#include "kernels/cpu/isa.h"

namespace {
// The one place an error reaches the terminal: exactly one line. The message is escaped again
// (core/printable.h) because not every exception is ours: nlohmann's parse errors and CLI11's quote
// input bytes as they are.
void print_error(const std::string& msg) { std::fprintf(stderr, "error: %s\n", ar::printable(msg).c_str()); }
}  // namespace

int main(int argc, char** argv) {
  ar::set_process_malloc_policy();  // core/malloc_policy.h
  ar::flush_denormals();            // core/float_mode.h: on this thread and every later one
  try {
    // AR_CPU_ISA caps our kernels and oneDNN in-process; OpenBLAS's kernels need a restart.
    ar::cpu::restart_for_openblas_core(argv);
  } catch (const ar::Error& e) {  // an unknown AR_CPU_ISA
    print_error(e.what());
    return 2;
  }
  // Before any thread starts: SIGINT/SIGTERM/SIGHUP remove temporary outputs and exit 128 + signal.
  ar::install_interrupt_cleanup();
  try {
    return ar::cli::run_command_line(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const ar::cli::UsageError& e) {
    print_error(e.what());
    return 2;
  } catch (const ar::Error& e) {
    print_error(e.what());
    switch (e.kind()) {
      case ar::ErrorKind::InvalidInput: return 1;
      case ar::ErrorKind::Unsupported: return 1;
      case ar::ErrorKind::Io: return 3;
      case ar::ErrorKind::Internal: return 4;
    }
  } catch (const std::exception& e) {
    print_error(e.what());
    return 4;
  }
  return 0;
}
