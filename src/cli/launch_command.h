// `autoround launch`: the supervisor that starts this node's ranks (distributed/launcher.h). Its runner
// returns the launcher's exit code (a failing rank's code, or 128 + a forwarded signal), so the
// subcommand registry keeps it apart from the runners that report failure by throwing.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace ar::cli {

// Stores `run` as the runner of subcommand `sub`.
using ExitCodeRunnerSink = std::function<void(CLI::App* sub, std::function<int()> run)>;

// Adds the `launch` subcommand: --nnodes, --node_rank, --nproc_per_node, --master_addr, --master_port,
// --advertise_addr, --grace, and the ranks' arguments after `--`.
void add_launch_command(CLI::App& app, const ExitCodeRunnerSink& add_runner);

}  // namespace ar::cli
