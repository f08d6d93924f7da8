// autoround CLI entry: subcommand table, error-to-exit-code mapping. The only place that exits.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/top_level.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/float_mode.h"
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
  CLI::App app{"autoround: SignRound (AutoRound) weight quantization for Hugging Face LLMs", "autoround"};
  app.require_subcommand(1);
  // Usage errors (unknown or missing options, values out of range: cli/option_checks.h) print one line,
  // like every other error, and exit 2.
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return "error: " + ar::printable(e.what()) + "\n"; });
  ar::cli::register_convert(app);
  ar::cli::register_generate(app);
  ar::cli::register_eval(app);
  ar::cli::register_quantize(app);
  ar::cli::register_logits(app);
  ar::cli::register_launch(app);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (const int rc = ar::cli::handle_top_level(app, args); rc >= 0) return rc;  // --version, --help, typos
  // auto-round style: `autoround --model DIR ...` (no subcommand) means `autoround quantize ...`.
  if (!args.empty() && args[0].rfind("--", 0) == 0) args.insert(args.begin(), "quantize");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ExtrasError& e) {
    print_error(ar::cli::explain_extras(app, args, e.what()));
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return ar::cli::run_selected(app);  // non-zero only from `launch`: a failed rank's code
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
