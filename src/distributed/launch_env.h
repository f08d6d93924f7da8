// Where this process sits in a multi-process job, read from its launcher's environment. One reader for
// every launcher, first match wins:
//   torchrun, `autoround launch`: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT (GROUP_RANK = node rank, optional)
//   Open MPI (mpirun):  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   MPICH / Intel MPI:  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm (srun):       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NODELIST
//                       (or SLURM_JOB_NODELIST), tasks per node from SLURM_STEP_TASKS_PER_NODE
// The rendezvous address: the --master_addr flag, else MASTER_ADDR, else (Slurm) the first host of the
// node list; the port: --master_port, else MASTER_PORT, else 29500. No launcher variables: a single
// process (world 1). Inconsistent or malformed values (RANK >= WORLD_SIZE, "abc", a multi-process job
// without a rendezvous address) are InvalidInput errors naming the variable and its value.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace ar::dist {

struct LaunchEnv {
  enum class Source { None, Torchrun, OpenMpi, Pmi, Slurm };
  Source source = Source::None;
  int rank = 0, world = 1, local_rank = 0, local_world = 1, node_rank = 0;
  std::string master_addr;  // empty for world 1
  int master_port = 29500;
  bool multiprocess() const { return world > 1; }
  std::string describe() const;  // "torchrun: rank 1 of 4 (local 1 of 2, node 0), rendezvous 10.0.0.1:29500"
};

// env(name): the variable's value, nullopt when unset. Flags: "" / 0 when not given.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
LaunchEnv detect_launch_env(const EnvLookup& env, const std::string& master_addr_flag = "", int master_port_flag = 0);
EnvLookup process_env();  // getenv

// The first host of a Slurm host list: "node[01-04,07],gpu2" -> "node01", "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ar::dist
