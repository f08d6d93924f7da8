// Subcommands. Each register_* adds its options to the app and stores a runner; run_selected()
// invokes the runner of the parsed subcommand.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <map>

namespace ar::cli {
// Runners keyed by subcommand, owned by the caller with its app, so option storage outlives parsing.
struct Registry {
  std::map<CLI::App*, std::function<void()>> runners;
  std::map<CLI::App*, std::function<int()>> exit_code_runners;  // `launch`: a rank's code is its result
};
void register_convert(CLI::App& app, Registry& reg);
void register_generate(CLI::App& app, Registry& reg);
void register_eval(CLI::App& app, Registry& reg);
void register_quantize(CLI::App& app, Registry& reg);
void register_logits(CLI::App& app, Registry& reg);
void register_launch(CLI::App& app, Registry& reg);
// Runs the parsed subcommand; returns its exit code (0 unless the subcommand is `launch`).
int run_selected(CLI::App& app, const Registry& reg);
}  // namespace ar::cli
