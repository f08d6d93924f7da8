// Subcommands. Each register_* adds its options to the app and stores a runner; run_selected()
// invokes the runner of the parsed subcommand.
#pragma once
#include <CLI/CLI.hpp>

namespace ar::cli {
void register_convert(CLI::App& app);
void register_generate(CLI::App& app);
void register_eval(CLI::App& app);
void register_quantize(CLI::App& app);
void register_logits(CLI::App& app);
void register_launch(CLI::App& app);
// Runs the parsed subcommand; returns its exit code (0 unless the subcommand is `launch`).
int run_selected(CLI::App& app);
}  // namespace ar::cli
