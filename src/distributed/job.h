// A multi-process job from one rank's side (docs/distributed.md):
//   start      rank 0 binds the rendezvous store at MASTER_ADDR:MASTER_PORT (an address in use is an
//              error at once; every interface with a job token, MASTER_ADDR's only without one); every
//              rank connects to it (retrying until --timeout), authenticates, links its liveness
//              (heartbeats) and builds the Gloo mesh through it.
//   handshake  identities compared before any work (distributed/handshake.h); then every rank has read what
//              it needs from the store, and rank 0 frees its keys.
//   liveness   a rank lost (killed, out of memory, cut off) or failed becomes every rank's verdict
//              within --timeout; each rank then ends at once with the verdict as its error, removing
//              its temporary outputs (a resumable run's state is kept), exit code 3.
//   finish     every rank says BYE; rank 0 keeps the store up until all did (bounded), so no rank
//              mistakes a finished job for a lost rank 0.
#pragma once
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "distributed/launch_env.h"
#include "parallel/process_link.h"

namespace ar::dist {

struct JobOptions {
  std::chrono::milliseconds timeout{60000};                // rendezvous, liveness
  std::chrono::milliseconds collective_timeout{30 * 60000};  // a live peer that stops answering
  std::chrono::milliseconds heartbeat{1000};
  std::string advertise_addr;  // this rank's address for the mesh ("" = GLOO_SOCKET_IFNAME or the route)
  // The job's secret (distributed/auth.h): every rendezvous connection proves it holds it. "": an
  // unauthenticated job, whose store listens on MASTER_ADDR's interface only.
  std::string token;
};

class Job {
 public:
  static std::unique_ptr<Job> start(const LaunchEnv& env, const JobOptions& opt);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  int rank() const;
  int size() const;
  const std::string& host() const;  // this rank's host name
  parallel::ProcessLink& link();
  // Compares every rank's identity (throws InvalidInput naming the ranks and the field on a mismatch;
  // the same on every rank).
  void handshake(const nlohmann::ordered_json& identity);
  void finish();
  // This rank failed with `message`: every other rank learns it at once (then this rank exits itself).
  void fail(const std::string& message);

 private:
  struct Impl;
  explicit Job(std::unique_ptr<Impl> impl);
  void release_store();
  std::unique_ptr<Impl> impl_;
};

// The local address a peer should use to reach this host: `advertise`, else GLOO_SOCKET_IFNAME's
// address (via Gloo), else the source address of the route to `master` (loopback for a local master).
std::string route_address(const std::string& master);

}  // namespace ar::dist
