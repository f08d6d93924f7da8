// `autoround quantize` as one rank of a multi-process job or as a single process: the launcher's
// environment decides (distributed/launch_env.h). A rank that fails tells every other rank at once (they stop
// with its message); a rank that finishes says goodbye; rank 0 logs, the others only warn and err.
#pragma once
#include <string>

#include "pipeline/quantize.h"

namespace ar::cli {

struct JobFlags {
  std::string master_addr;  // --master_addr ("" = MASTER_ADDR or the Slurm node list)
  int master_port = 0;      // --master_port (0 = MASTER_PORT or 29500)
  double timeout_s = 60;    // --timeout: rendezvous and lost-rank detection
  std::string advertise_addr;  // --advertise_addr ("" = AR_ADVERTISE_ADDR, GLOO_SOCKET_IFNAME or the route)
  std::string job_token_file;  // --job_token_file ("" = AR_JOB_TOKEN, else an unauthenticated job)
};

void run_quantize(const QuantizeOptions& qo, const JobFlags& flags);

}  // namespace ar::cli
