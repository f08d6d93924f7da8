// The parts of the command line above the subcommands: --version, top-level --help (which shows the
// quantize options, as `autoround --model ...` is the main use), and a suggestion for a typo'd
// subcommand or option ("did you mean ...?").
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace ar::cli {

// Handles what must not reach the parser: returns the exit code when it answered (>= 0), else -1.
int handle_top_level(CLI::App& app, const std::vector<std::string>& args);

// One line for CLI11's "arguments were not expected" error, naming the first unknown option of the
// selected subcommand and the nearest known one.
std::string explain_extras(CLI::App& app, const std::vector<std::string>& args, const std::string& what);

}  // namespace ar::cli
