#include "distributed/launch_env.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace ar::dist {

namespace {

// One launcher's variable names: rank and size are required to recognise it, the local pair is optional.
struct Vars {
  LaunchEnv::Source source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};
// First match wins. torchrun's names come first: `autoround launch` sets them, and a job started under
// srun or mpirun that runs `autoround launch` (or torchrun) inside passes both sets to the ranks.
constexpr Vars kLaunchers[] = {
    {LaunchEnv::Source::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {LaunchEnv::Source::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {LaunchEnv::Source::Pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {LaunchEnv::Source::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

const char* source_name(LaunchEnv::Source s) {
  switch (s) {
    case LaunchEnv::Source::None: return "single process";
    case LaunchEnv::Source::Torchrun: return "torchrun";
    case LaunchEnv::Source::OpenMpi: return "Open MPI";
    case LaunchEnv::Source::Pmi: return "MPICH/Intel MPI";
    case LaunchEnv::Source::Slurm: return "Slurm";
  }
  return "?";
}

// The whole string as a decimal integer in [lo, hi]; `what` names the variable or flag in errors.
int parse_int(const std::string& what, const std::string& s, long long lo, long long hi) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    fail(ErrorKind::InvalidInput, what + "='" + s + "' is not an integer");
  if (v < lo && hi == INT_MAX) fail(ErrorKind::InvalidInput, what + "=" + s + " must be at least " + std::to_string(lo));
  if (v < lo || v > hi)
    fail(ErrorKind::InvalidInput,
         what + "=" + s + " is out of range (" + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return int(v);
}

// An optional integer variable: `fallback` when unset.
int int_var(const EnvLookup& env, const char* name, int fallback, long long lo) {
  const auto v = env(name);
  return v ? parse_int(name, *v, lo, INT_MAX) : fallback;
}

// Slurm's tasks-per-node list ("2(x3),1": 2 tasks on each of the first three nodes, 1 on the fourth),
// expanded to one count per node.
std::vector<int> expand_tasks_per_node(const std::string& name, const std::string& s) {
  auto malformed = [&] {
    fail(ErrorKind::InvalidInput, name + "='" + s + "' is malformed (expected counts like 2(x3),1)");
  };
  auto count = [&](const std::string& t) {  // a positive count, capped so a typo cannot allocate much
    int v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v < 1 || v > (1 << 20)) malformed();
    return v;
  };
  std::vector<int> counts;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    const size_t paren = item.find("(x");
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') malformed();
      repeat = count(item.substr(paren + 2, item.size() - paren - 3));
    }
    counts.insert(counts.end(), size_t(repeat), count(item.substr(0, paren)));
    if (counts.size() > (1 << 20)) malformed();
    pos = comma + 1;
  }
  return counts;
}

// Tasks on this node: the count at SLURM_NODEID, else (no node id, or a list shorter than the node
// index, as with heterogeneous steps) the first count, which is exact for the common uniform layout.
int slurm_local_world(const EnvLookup& env, int node_id, int fallback) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const auto v = env(name);
    if (!v) continue;
    const auto counts = expand_tasks_per_node(name, *v);
    return node_id >= 0 && size_t(node_id) < counts.size() ? counts[size_t(node_id)] : counts.front();
  }
  return fallback;
}

// The first host of a Slurm host list; `what` names the list's source in errors.
std::string first_host(const std::string& what, const std::string& list) {
  std::string host;
  size_t i = 0;
  while (i < list.size() && list[i] != ',') {
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    // A bracket group: "[01-04,07]" stands for 01, 02, 03, 04, 07; its first member is the text up to
    // the first '-', ',' or ']' (zero padding is part of the name, so the digits are kept as written).
    const size_t close = list.find(']', i);
    if (close == std::string::npos) fail(ErrorKind::InvalidInput, what + "='" + list + "' has an unclosed '['");
    const size_t stop = list.find_first_of("-,]", i + 1);
    if (stop == i + 1) fail(ErrorKind::InvalidInput, what + "='" + list + "' has an empty range in '[...]'");
    host += list.substr(i + 1, stop - i - 1);
    i = close + 1;
  }
  if (host.empty()) fail(ErrorKind::InvalidInput, what + "='" + list + "' names no host");
  return host;
}

// The rank fields of the first launcher whose rank and size variables are both set.
LaunchEnv read_ranks(const EnvLookup& env) {
  LaunchEnv e;
  for (const Vars& v : kLaunchers) {
    const auto rank = env(v.rank), size = env(v.size);
    if (!rank || !size) continue;
    e.source = v.source;
    e.world = parse_int(v.size, *size, 1, INT_MAX);
    e.rank = parse_int(v.rank, *rank, 0, INT_MAX);
    if (e.rank >= e.world)
      fail(ErrorKind::InvalidInput, std::string(v.rank) + "=" + *rank + " is not below " + v.size + "=" + *size);
    // Absent local variables: one node holding every rank (what a bare `RANK=1 WORLD_SIZE=2` means).
    e.local_rank = int_var(env, v.local_rank, e.rank, 0);
    int node_id = -1;
    if (v.source == LaunchEnv::Source::Slurm) {
      node_id = int_var(env, "SLURM_NODEID", -1, 0);
      // SLURM_TASKS_PER_NODE describes the allocation, which may hold more tasks than this step runs.
      e.local_world = std::min(slurm_local_world(env, node_id, e.world), e.world);
    } else {
      e.local_world = int_var(env, v.local_size, e.world, 1);
    }
    const std::string lw_name = v.local_size                         ? v.local_size
                                : env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                                   : "SLURM_TASKS_PER_NODE";
    if (e.local_rank >= e.local_world)
      fail(ErrorKind::InvalidInput, std::string(v.local_rank) + "=" + std::to_string(e.local_rank) + " is not below " +
                                        lw_name + "=" + std::to_string(e.local_world));
    if (e.local_world > e.world)
      fail(ErrorKind::InvalidInput, lw_name + "=" + std::to_string(e.local_world) + " exceeds " + v.size + "=" + *size);
    // The node index: GROUP_RANK under torchrun, SLURM_NODEID under Slurm, else ranks packed node by node
    // (mpirun's default by-slot mapping).
    const int packed = e.rank / e.local_world;
    e.node_rank = v.source == LaunchEnv::Source::Torchrun ? int_var(env, "GROUP_RANK", packed, 0)
                  : node_id >= 0                          ? node_id
                                                          : packed;
    return e;
  }
  return e;
}

// The rendezvous address: the flag, MASTER_ADDR, then (Slurm) the node list's first host.
std::string rendezvous_addr(const EnvLookup& env, const LaunchEnv& e, const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const auto v = env("MASTER_ADDR"); v && !v->empty()) return *v;
  if (e.source != LaunchEnv::Source::Slurm) return "";
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"})
    if (const auto v = env(name)) return first_host(name, *v);
  return "";
}

}  // namespace

LaunchEnv detect_launch_env(const EnvLookup& env, const std::string& master_addr_flag, int master_port_flag) {
  if (master_port_flag < 0 || master_port_flag > 65535)
    fail(ErrorKind::InvalidInput, "--master_port " + std::to_string(master_port_flag) + " is out of range (1..65535)");
  LaunchEnv e = read_ranks(env);
  if (master_port_flag > 0) {
    e.master_port = master_port_flag;
  } else if (const auto p = env("MASTER_PORT")) {
    e.master_port = parse_int("MASTER_PORT", *p, 1, 65535);
  }
  if (!e.multiprocess()) return e;  // a single process meets no one: no address needed
  e.master_addr = rendezvous_addr(env, e, master_addr_flag);
  if (e.master_addr.empty())
    fail(ErrorKind::InvalidInput, std::string(source_name(e.source)) + " started rank " + std::to_string(e.rank) +
                                      " of " + std::to_string(e.world) +
                                      " without a rendezvous address: set MASTER_ADDR or pass --master_addr");
  return e;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::string first_slurm_host(const std::string& nodelist) { return first_host("Slurm node list", nodelist); }

std::string LaunchEnv::describe() const {
  if (source == Source::None) return "single process";
  std::string s = std::string(source_name(source)) + ": rank " + std::to_string(rank) + " of " + std::to_string(world) +
                  " (local " + std::to_string(local_rank) + " of " + std::to_string(local_world) + ", node " +
                  std::to_string(node_rank) + ")";
  if (!master_addr.empty()) s += ", rendezvous " + master_addr + ":" + std::to_string(master_port);
  return s;
}

}  // namespace ar::dist
