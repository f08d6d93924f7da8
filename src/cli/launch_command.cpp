#include "cli/launch_command.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <memory>

#include "cli/option_checks.h"
#include "core/error.h"
#include "core/log.h"
#include "distributed/auth.h"
#include "distributed/launcher.h"

namespace ar::cli {

namespace {

// This binary, for the ranks: argv[0] may be a bare name found on PATH or a path relative to a
// directory the ranks no longer share.
std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail(ErrorKind::Io, "launch: cannot read /proc/self/exe to find the autoround binary");
  return std::string(buf, size_t(n));
}

// The ranks' job token (docs/distributed.md, "Threat model"): AR_JOB_TOKEN or a --job_token_file in the
// ranks' arguments reach them as they are; otherwise one node makes a fresh token for its own ranks.
// Several nodes must share one, which no node can invent for the others: without it they run
// unauthenticated, and the log says how to fix that.
void choose_job_token(dist::LaunchOptions& o) {
  const char* env = std::getenv("AR_JOB_TOKEN");
  const bool file = std::any_of(o.args.begin(), o.args.end(), [](const std::string& a) {
    return a == "--job_token_file" || a.rfind("--job_token_file=", 0) == 0;
  });
  if ((env && *env) || file) return;
  if (o.nnodes == 1) {
    o.job_token = dist::make_job_token();
    log_info("launch: a fresh job token authenticates this node's ranks (AR_JOB_TOKEN)");
    return;
  }
  log_warn("launch: no AR_JOB_TOKEN: the rendezvous of this " + std::to_string(o.nnodes) +
           "-node job is unauthenticated; export the same secret as AR_JOB_TOKEN on every node (e.g. `openssl rand "
           "-hex 32`)");
}

// The rendezvous flags left out: MASTER_ADDR / MASTER_PORT from the environment (as a rank would read
// them), else 127.0.0.1:29500, which only a single node can use.
void default_rendezvous(const CLI::App& sub, dist::LaunchOptions& o) {
  const char* addr = std::getenv("MASTER_ADDR");
  if (sub.count("--master_addr") == 0 && addr && *addr) o.master_addr = addr;
  else if (sub.count("--master_addr") == 0 && o.nnodes > 1)
    usage_error("--master_addr is required with --nnodes " + std::to_string(o.nnodes) +
                " (an address of node 0 that every node can reach)");
  const char* port = std::getenv("MASTER_PORT");
  if (sub.count("--master_port") == 0 && port && *port) {
    const std::string s = port;
    int p = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), p);
    if (ec != std::errc() || end != s.data() + s.size() || p < 1 || p > 65535)
      usage_error("MASTER_PORT='" + s + "' is not a port (1..65535)");
    o.master_port = p;
  }
}

}  // namespace

void add_launch_command(CLI::App& app, const ExitCodeRunnerSink& add_runner) {
  auto* sub = app.add_subcommand(
      "launch", "Start this node's ranks of a multi-process run and supervise them "
                "(autoround launch --nproc_per_node 2 -- --model DIR ...)");
  auto o = std::make_shared<dist::LaunchOptions>();
  sub->add_option("--nnodes", o->nnodes, "number of nodes")->capture_default_str();
  sub->add_option("--node_rank", o->node_rank, "this node's index, 0..nnodes-1")->capture_default_str();
  sub->add_option("--nproc_per_node", o->nproc_per_node, "ranks started on this node")->capture_default_str();
  sub->add_option("--master_addr", o->master_addr,
                  "address of node 0, reachable from every node (default: $MASTER_ADDR, else 127.0.0.1 "
                  "with one node)");
  sub->add_option("--master_port", o->master_port, "rendezvous port on node 0 (default: $MASTER_PORT, else 29500)");
  sub->add_option("--advertise_addr", o->advertise_addr,
                  "address the other nodes use to reach this node's ranks (passed as AR_ADVERTISE_ADDR)");
  sub->add_option("--grace", o->grace_s, "seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->capture_default_str();
  sub->add_option("args", o->args, "the ranks' arguments, after `--` (those of quantize)");
  sub->parse_complete_callback([sub, o] {
    default_rendezvous(*sub, *o);
    as_usage([&] { dist::check_launch_options(*o); });
  });
  add_runner(sub, [o] {
    o->self_exe = self_exe();
    choose_job_token(*o);
    return dist::run_launcher(*o);
  });
}

}  // namespace ar::cli
