#include "distributed/job.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <thread>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "distributed/handshake.h"
#include "distributed/process_group.h"
#include "distributed/store.h"

namespace ar::dist {

using std::chrono::milliseconds;

std::string route_address(const std::string& master) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(master.c_str(), "9", &hints, &res) != 0 || !res)
    ar::fail(ErrorKind::InvalidInput, "rendezvous address '" + master + "' does not resolve");
  std::string out;
  const int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage me{};
  socklen_t len = sizeof me;
  // A datagram socket's connect() only picks the route: no packet is sent.
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* a = me.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&me)->sin6_addr)
                                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&me)->sin_addr);
    if (inet_ntop(me.ss_family, a, buf, sizeof buf)) out = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty()) fail(ErrorKind::Io, "no route to the rendezvous address '" + master + "'");
  return out;
}

namespace {
std::string hostname() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}
std::string secs(milliseconds t) { return std::to_string(t.count() / 1000) + " s"; }

// Rank 0's store. With a job token it listens on every interface (MASTER_ADDR may name a service or a
// NAT address that is not this host's own); without one, on MASTER_ADDR's address only, and says so.
std::unique_ptr<StoreServer> serve_rendezvous(const LaunchEnv& env, const JobOptions& opt) {
  if (!opt.token.empty()) return std::make_unique<StoreServer>("", env.master_port, env.world, opt.timeout, opt.token);
  log_warn("rendezvous: unauthenticated (no AR_JOB_TOKEN or --job_token_file): the store listens on " +
           env.master_addr + " only, and any process that can reach it there can join or stop this job "
           "(docs/distributed.md, \"Threat model\")");
  try {
    return std::make_unique<StoreServer>(env.master_addr, env.master_port, env.world, opt.timeout, opt.token);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(e.what()) + "; without a job token the store listens on MASTER_ADDR only: "
                                                  "set the same AR_JOB_TOKEN on every rank to listen on every interface");
  }
}
}  // namespace

struct Job::Impl {
  LaunchEnv env;
  JobOptions opt;
  std::string host;
  std::unique_ptr<StoreServer> server;  // rank 0
  std::unique_ptr<StoreClient> store;
  std::unique_ptr<Liveness> live;
  std::unique_ptr<GlooProcessGroup> group;
  std::atomic<bool> failing{false};

  // A Gloo error: the liveness verdict names the lost rank; wait for it briefly.
  std::string explain(const std::string& op, const std::string& what) {
    for (int i = 0; i < 3 * 10 && live && live->verdict().empty(); ++i) std::this_thread::sleep_for(milliseconds(100));
    const std::string v = live ? live->verdict() : "";
    return "multi-process " + op + " failed on rank " + std::to_string(env.rank) + ": " + (v.empty() ? what : v);
  }
  void on_verdict(const std::string& verdict) {
    if (failing.exchange(true)) return;  // this rank's own failure: its main thread reports it
    exit_with_cleanup("error: " + verdict + "; stopping rank " + std::to_string(env.rank) + " (" + host + ")", 3);
  }
  void connect_mesh();
};

void Job::Impl::connect_mesh() {
  gloo::transport::tcp::attr attr;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (!opt.advertise_addr.empty()) attr.hostname = opt.advertise_addr;
  else if (ifname && *ifname) attr.iface = ifname;
  else attr.hostname = route_address(env.master_addr);
  std::shared_ptr<gloo::transport::Device> dev;
  try {
    dev = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    ar::fail(ErrorKind::Io, "rank " + std::to_string(env.rank) + ": cannot open the mesh's device on " +
                            (attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface) + ": " + e.what());
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world);
  ctx->setTimeout(opt.timeout);
  gloo::rendezvous::PrefixStore prefixed("gloo", *store);
  try {
    ctx->connectFullMesh(prefixed, dev);
  } catch (const std::exception& e) {
    ar::fail(ErrorKind::Io, explain("mesh connection", e.what()));
  }
  ctx->setTimeout(opt.collective_timeout);
  group = std::make_unique<GlooProcessGroup>(ctx, [this](const std::string& op, const std::string& w) { return explain(op, w); });
}

std::unique_ptr<Job> Job::start(const LaunchEnv& env, const JobOptions& opt) {
  // Gloo writes to its pair sockets without MSG_NOSIGNAL: a peer that died mid-collective would kill
  // this rank with SIGPIPE (exit 141, seen under the avx2 cap's timing) before the liveness verdict
  // could name the lost rank. Ignored, the write fails with EPIPE, Gloo throws, and the error names it.
  std::signal(SIGPIPE, SIG_IGN);
  auto im = std::make_unique<Impl>();
  im->env = env;
  im->opt = opt;
  im->host = hostname();
  if (env.rank == 0) im->server = serve_rendezvous(env, opt);
  log_info("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world) + " on " + im->host +
           ": rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) + " (timeout " +
           secs(opt.timeout) + (opt.token.empty() ? ", unauthenticated)" : ", authenticated by the job token)"));
  im->store = std::make_unique<StoreClient>(env.master_addr, env.master_port, opt.timeout, opt.token, env.rank);
  Impl* raw = im.get();
  im->live = std::make_unique<Liveness>(env.master_addr, env.master_port, env.rank, im->host, opt.heartbeat, opt.timeout,
                                        [raw](const std::string& v) { raw->on_verdict(v); }, opt.token);
  im->connect_mesh();
  return std::unique_ptr<Job>(new Job(std::move(im)));
}

Job::Job(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Job::~Job() = default;
int Job::rank() const { return impl_->env.rank; }
int Job::size() const { return impl_->env.world; }
const std::string& Job::host() const { return impl_->host; }
parallel::ProcessLink& Job::link() { return *impl_->group; }

void Job::handshake(const nlohmann::ordered_json& identity) {
  nlohmann::ordered_json me = identity;
  me["host"] = impl_->host;
  const std::string mine = me.dump();
  std::vector<nlohmann::ordered_json> ids(static_cast<size_t>(size()));
  try {  // a store error while another rank failed: that rank's message, not the broken connection
    impl_->store->set("hello/" + std::to_string(rank()), std::vector<char>(mine.begin(), mine.end()));
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) {
        ids[size_t(r)] = me;
        continue;
      }
      const std::vector<char> b = impl_->store->get("hello/" + std::to_string(r));
      ids[size_t(r)] = parse_identity(std::string(b.begin(), b.end()), r, me);
    }
    release_store();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Io) throw;
    ar::fail(ErrorKind::Io, impl_->explain("handshake", e.what()));
  }
  if (const std::string bad = handshake_mismatch(ids); !bad.empty()) {
    impl_->failing = true;  // every rank fails alike: no verdict needed
    ar::fail(ErrorKind::InvalidInput, bad);
  }
}

// Every rank has read the mesh addresses and the identities: once each says so, rank 0 frees the
// store's keys (nothing stays readable, and its memory is the job's for the rest of the run).
void Job::release_store() {
  impl_->store->set("read/" + std::to_string(rank()), {'1'});
  if (!impl_->server) return;
  std::vector<std::string> keys;
  for (int r = 0; r < size(); ++r) keys.push_back("read/" + std::to_string(r));
  impl_->store->wait(keys);
  impl_->server->release_keys();
}

void Job::finish() {
  impl_->failing = true;  // from here on, peers leaving is the normal end
  impl_->live->finish();
  if (impl_->server && !impl_->server->wait_all_bye(impl_->opt.timeout))
    log_warn("rank 0: not every rank said goodbye within " + secs(impl_->opt.timeout));
}

void Job::fail(const std::string& message) {
  impl_->failing = true;
  impl_->live->report_failure(message);
  // Rank 0 serves the verdict: the store stays up for two heartbeats and a half, so every other rank
  // reads this rank's message instead of only finding the store gone.
  if (impl_->server) std::this_thread::sleep_for(2 * impl_->opt.heartbeat + milliseconds(500));
}

}  // namespace ar::dist
