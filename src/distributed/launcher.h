// `autoround launch`: starts this node's ranks of a multi-process job and supervises them, like
// torchrun's agent without elastic restarts.
//   autoround launch --nnodes N --node_rank r --nproc_per_node P --master_addr A --master_port p
//                    [--advertise_addr X] [--grace S] -- <quantize args>
// Local rank i runs `<self> <quantize args>` with RANK = r*P + i, WORLD_SIZE = N*P, LOCAL_RANK = i,
// LOCAL_WORLD_SIZE = P, GROUP_RANK = r, MASTER_ADDR = A, MASTER_PORT = p and, when given,
// AR_ADVERTISE_ADDR = X; each child is in the launcher's process group (so a terminal's Ctrl-C reaches
// all) and dies with the launcher (PR_SET_PDEATHSIG).
// SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to every child. When one child exits non-zero or
// by a signal, the others get SIGTERM, then SIGKILL after the grace period; the launcher exits with the
// first failing child's code (128 + signal for a signal) after logging which local/global rank failed
// and how. All children exiting 0 -> 0.
#pragma once
#include <string>
#include <vector>

namespace ar::dist {

struct LaunchOptions {
  int nnodes = 1, node_rank = 0, nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string advertise_addr;
  std::string job_token;  // passed as AR_JOB_TOKEN when not empty
  double grace_s = 10;
  std::string self_exe;           // the autoround binary (/proc/self/exe)
  std::vector<std::string> args;  // after "--": passed to every rank unchanged
};

// Checks the options (counts >= 1, node_rank < nnodes, port 1..65535, args not empty) with errors
// naming the flag; then runs the ranks and returns the launcher's exit code.
// While it runs, SIGINT/SIGTERM/SIGHUP/SIGCHLD have the launcher's handlers (the previous ones are put
// back on return), so one launcher per process at a time; the children die with the calling thread.
int run_launcher(const LaunchOptions& opt);

// The option checks of run_launcher alone (self_exe excepted), for parse-time usage errors.
void check_launch_options(const LaunchOptions& opt);

}  // namespace ar::dist
