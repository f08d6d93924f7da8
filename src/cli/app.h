// The autoround command line as a library call: main() runs it, and the Python module (python/) runs
// it in-process with the arguments its keywords stand for, so both parse and run the same code.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace ar::cli {

// An option unknown, missing, out of range, malformed or contradicting another (main(): exit 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses `args` (the command line without the program name; `--model DIR ...` without a subcommand is
// `quantize --model DIR ...`) and runs the subcommand. Returns the exit code of what answers without a
// run (--help, --version: 0; an unknown subcommand: 2, its line printed) or of `launch`, else 0.
// Throws UsageError before any file is read, or the run's ar::Error.
int run_command_line(std::vector<std::string> args);

}  // namespace ar::cli
