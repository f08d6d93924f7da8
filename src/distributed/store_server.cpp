// StoreServer: one accept thread (which also checks heartbeats on every poll tick) and one thread per
// connection. A job has about two connections per rank (its store client and its liveness link), so
// a thread each is simpler than a multiplexed loop and lets GET/WAIT block on a condition variable.
// A connection's thread first runs the authentication (distributed/auth.h) within StoreLimits::auth_deadline;
// only then does it read requests. The accept thread bounds how many connections may be waiting for
// that (in all and per peer address), so strangers cannot exhaust threads or descriptors; a newcomer
// past a bound displaces the oldest waiting connection (of its own address, or of the address waiting
// with the most), never an authenticated one, so strangers cannot lock the ranks out either: a rank's
// handshake takes one round trip, and a rank whose connection was displaced retries (auth::connect).
// Shutdown: `stopping` wakes the condition waits, the StopLatch wakes every poll(); fds are closed only
// after their threads are joined, so no thread ever uses a closed (or reused) descriptor.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "distributed/auth.h"
#include "distributed/store.h"
#include "distributed/store_frame.h"

namespace ar::dist {

using namespace frame;

namespace {

// How often a GET/WAIT held by the server checks that its client is still there.
constexpr Millis kWaitPoll{200};

// A connection awaits authentication, is a member's, or was closed for a newer one (evicted). The
// accept thread evicts and the connection's thread admits, each by one compare-exchange from Pending.
enum class ConnState { Pending, Member, Evicted };

struct Conn {
  int fd = -1;
  std::string peer;     // "10.0.0.2:41234", for log lines
  std::string address;  // "10.0.0.2": the per-peer bound
  std::thread thread;
  std::atomic<ConnState> state{ConnState::Pending};
  std::atomic<bool> done{false};
  bool pending() const { return !done.load() && state.load() == ConnState::Pending; }
  // Pending -> to; false when the other side's change came first.
  bool leave_pending(ConnState to) {
    ConnState expected = ConnState::Pending;
    return state.compare_exchange_strong(expected, to);
  }
};

// What this connection said about itself (HELLO / BYE); only its own thread touches it.
struct ConnRole {
  int rank = -1;  // -1: a plain store client, not a liveness link
  bool bye = false;
};

struct RankState {
  std::string host;
  Clock::time_point last_beat;
  bool connected = true, bye = false;
};

// The peer's numeric address and "address:port".
std::pair<std::string, std::string> peer_name(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return {"?", "?"};
  return {host, host_port(host, std::atoi(serv))};
}

// True when the peer closed its side (or the socket failed): a held GET/WAIT need not wait on.
bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// Logs the first few of a kind of event, then only at powers of two: a flood of strangers must not
// flood the job's log.
bool worth_logging(size_t count) { return count <= 8 || (count & (count - 1)) == 0; }

std::string bind_reason(int e) {
  switch (e) {
    case EADDRINUSE: return "address in use (another job or a previous run still holds it)";
    case EACCES: return "permission denied (ports below 1024 need privileges)";
    case EADDRNOTAVAIL: return "address not available on this machine (MASTER_ADDR must name this host)";
    default: return std::strerror(e);
  }
}

// A listening socket on addr:port ("" = every interface, IPv6 dual-stack when available).
int listen_on(const std::string& addr, int port) {
  const std::string where = "MASTER_PORT " + std::to_string(port) + " on " + (addr.empty() ? "all interfaces" : addr);
  if (port < 0 || port > 65535) fail(ErrorKind::InvalidInput, where + ": not a TCP port (0-65535)");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int g = ::getaddrinfo(addr.empty() ? nullptr : addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (g != 0) fail(ErrorKind::InvalidInput, where + ": cannot resolve the address: " + ::gai_strerror(g));
  // The wildcard's IPv6 entry first: with V6ONLY off it accepts IPv4 clients too.
  std::vector<addrinfo*> order;
  for (addrinfo* a = res; a; a = a->ai_next) order.push_back(a);
  if (addr.empty())
    std::stable_partition(order.begin(), order.end(), [](addrinfo* a) { return a->ai_family == AF_INET6; });
  int fd = -1, first_err = 0;
  for (addrinfo* a : order) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    const int one = 1, zero = 0;
    if (fd >= 0) {
      // A previous run's connections in TIME_WAIT must not block a restart on the same port.
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    }
    if (!first_err) first_err = errno;
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) fail(ErrorKind::Io, where + ": " + bind_reason(first_err ? first_err : EADDRNOTAVAIL));
  return fd;
}

// cv.wait_until, except that "no deadline" waits without one (a time_point::max() deadline is not
// portable through the clock conversions inside wait_until).
template <class Pred>
void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lk, Deadline dl, Pred pred) {
  if (dl == kNoDeadline)
    cv.wait(lk, pred);
  else
    cv.wait_until(lk, dl, pred);
}

}  // namespace

struct StoreServer::Impl {
  int world;
  Millis timeout;
  std::string token;
  StoreLimits limits;
  int listen_fd = -1, port = 0;
  StopLatch stop;
  size_t refused_conns = 0, evicted_conns = 0;  // the accept thread's
  std::atomic<size_t> dropped{0};  // connections that failed authentication
  std::atomic<size_t> serving{0};  // connection threads not yet finished

  mutable std::mutex m;  // guards everything below
  std::condition_variable cv;  // a key set, a BYE, the verdict, stopping
  bool stopping = false;
  std::unordered_map<std::string, std::string> kv;
  size_t kv_bytes = 0;  // keys + values in kv
  std::map<int, RankState> ranks;
  int byes = 0;
  std::string verdict;

  std::list<std::unique_ptr<Conn>> conns;  // the accept thread's (the destructor's once it is joined)
  std::thread acceptor;

  void accept_loop();
  void accept_one();
  std::string members_full() const;
  Conn* eviction_victim(const std::string& address) const;
  void evict_for(const std::string& address, const std::string& newcomer);
  bool authenticate(Conn& c);
  void set(const Message& req, Message& reply);
  void reap();
  void check_heartbeats();
  void serve(Conn& c);
  bool handle(const Conn& c, ConnRole& role, const Message& req, Message& reply);
  bool wait_keys(int fd, const std::vector<std::string>& keys, Millis within, std::vector<std::string>& missing);
  void hello(const Conn& c, ConnRole& role, const Message& req, Message& reply);
  void set_verdict_locked(const std::string& v);
  std::string who_locked(const ConnRole& role, const Conn& c) const;
};

void StoreServer::Impl::set_verdict_locked(const std::string& v) {
  if (!verdict.empty() || stopping) return;  // the first verdict is the job's
  verdict = v;
  log_warn("rendezvous: " + v);
  cv.notify_all();
}

std::string StoreServer::Impl::who_locked(const ConnRole& role, const Conn& c) const {
  if (role.rank < 0) return "a client at " + c.peer;
  return "rank " + std::to_string(role.rank) + " (host " + ranks.at(role.rank).host + ")";
}

void StoreServer::Impl::accept_loop() {
  // Heartbeat deadlines are checked on every wake-up; the tick bounds how late a loss is noticed.
  const int tick_ms = int(std::clamp<int64_t>(timeout.count() / 10, 10, 200));
  for (;;) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop.fd(), POLLIN, 0}};
    const int r = ::poll(p, 2, tick_ms);
    if (p[1].revents) return;
    if (r > 0 && (p[0].revents & POLLIN)) accept_one();
    check_heartbeats();
    reap();
  }
}

void StoreServer::Impl::accept_one() {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    // Out of descriptors: the pending connection stays queued; pause rather than spin on it.
    if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(Millis(50));
    return;
  }
  const auto [address, peer] = peer_name(addr, len);
  if (const std::string full = members_full(); !full.empty()) {
    if (worth_logging(++refused_conns))
      log_warn("rendezvous: refused the connection from " + peer + ": " + full + " (" + std::to_string(refused_conns) +
               " refused so far)");
    ::close(fd);
    return;
  }
  evict_for(address, peer);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto c = std::make_unique<Conn>();
  c->fd = fd;
  c->peer = peer;
  c->address = address;
  Conn& ref = *c;
  conns.push_back(std::move(c));
  ++serving;
  ref.thread = std::thread([this, &ref] { serve(ref); });
}

// "" while members (authenticated connections) may open another connection, else why not. Only
// members count: strangers cannot fill this bound.
std::string StoreServer::Impl::members_full() const {
  size_t live = 0;
  for (const auto& c : conns) live += !c->done.load() && c->state.load() == ConnState::Member;
  const size_t cap = limits.connections ? limits.connections : 4 * size_t(world) + 16;
  if (live >= cap) return std::to_string(live) + " authenticated connections open (limit " + std::to_string(cap) + ")";
  return "";
}

// The waiting connection a newcomer from `address` displaces, or nullptr while both bounds leave room:
// at the per-address bound, that address's oldest; at the bound in all, the oldest of the address with
// the most waiting (a flood from a few addresses displaces its own connections, not a rank's).
Conn* StoreServer::Impl::eviction_victim(const std::string& address) const {
  std::map<std::string, size_t> waiting;  // per address
  size_t pending = 0;
  for (const auto& c : conns)
    if (c->pending()) ++waiting[c->address], ++pending;
  std::string from;
  if (waiting[address] >= limits.pending_per_peer) {
    from = address;
  } else if (pending >= limits.pending) {
    for (const auto& [a, n] : waiting)
      if (from.empty() || n > waiting[from]) from = a;
  } else {
    return nullptr;
  }
  for (const auto& c : conns)  // accept order: the first is the oldest
    if (c->pending() && c->address == from) return c.get();
  return nullptr;
}

// Makes room for a newcomer within the pending bounds: each victim's socket is shut down, which ends
// its authentication at once (its thread then finishes and is reaped). A victim that authenticated in
// the meantime stays, and the next one is taken.
void StoreServer::Impl::evict_for(const std::string& address, const std::string& newcomer) {
  while (Conn* v = eviction_victim(address)) {
    if (!v->leave_pending(ConnState::Evicted)) continue;
    ::shutdown(v->fd, SHUT_RDWR);
    if (worth_logging(++evicted_conns))
      log_warn("rendezvous: closed the unauthenticated connection from " + v->peer + " for a newer one from " +
               newcomer + " (at most " + std::to_string(limits.pending) + " await authentication, " +
               std::to_string(limits.pending_per_peer) + " per address; " + std::to_string(evicted_conns) +
               " closed so far)");
  }
}

void StoreServer::Impl::reap() {
  for (auto it = conns.begin(); it != conns.end();) {
    if (!(*it)->done.load()) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    ::close((*it)->fd);
    it = conns.erase(it);
  }
}

void StoreServer::Impl::check_heartbeats() {
  std::lock_guard lk(m);
  if (!verdict.empty()) return;
  const auto now = Clock::now();
  for (const auto& [rank, s] : ranks) {
    if (s.connected && !s.bye && now - s.last_beat > timeout) {
      set_verdict_locked("rank " + std::to_string(rank) + " (host " + s.host + ") lost: no heartbeat for " +
                         seconds_text(timeout));
      return;
    }
  }
}

bool StoreServer::Impl::authenticate(Conn& c) {
  const auth::Outcome a = auth::server(c.fd, token, deadline_after(std::min(timeout, limits.auth_deadline)), stop.fd(),
                                       [&c] { return c.leave_pending(ConnState::Member); });
  if (a.ok) return true;
  if (c.state.load() == ConnState::Evicted) return false;  // logged by evict_for
  if (const size_t n = ++dropped; worth_logging(n) && !stop.fired()) {
    const std::string claim =
        a.claimed_rank == kPlainClient ? "" : " (it claims rank " + std::to_string(a.claimed_rank) + ")";
    log_warn("rendezvous: dropped the connection from " + c.peer + claim + ": authentication failed: " + a.why + " (" +
             std::to_string(n) + " dropped so far)");
  }
  return false;
}

void StoreServer::Impl::serve(Conn& c) {
  ConnRole role;
  RecvLimits lim;
  lim.frame = timeout;  // a request, once begun, arrives whole within the liveness timeout
  for (bool ok = authenticate(c); ok;) {
    Message req, reply;
    const IoResult r = recv_message(c.fd, req, lim, stop.fd());
    if (r.status == IoStatus::TimedOut)
      log_warn("rendezvous: closing the connection from " + c.peer + ": a request begun but not finished within " +
               seconds_text(timeout));
    if (r.status == IoStatus::Malformed || r.status == IoStatus::Failed)
      log_warn("rendezvous: closing the connection from " + c.peer + ": " + r.describe());
    if (!r.ok() || !handle(c, role, req, reply)) break;
    // A client that stops reading its replies is dropped after the liveness timeout.
    if (!send_all(c.fd, encode(reply), deadline_after(timeout), stop.fd()).ok()) break;
  }
  {
    std::lock_guard lk(m);
    if (role.rank >= 0) {
      ranks.at(role.rank).connected = false;
      if (!role.bye) set_verdict_locked(who_locked(role, c) + " lost: connection closed without finishing");
    }
  }
  ::shutdown(c.fd, SHUT_RDWR);  // the peer sees the close now; the fd itself is closed after the join
  auth::thread_done();
  c.done.store(true);
  --serving;
}

bool StoreServer::Impl::wait_keys(int fd, const std::vector<std::string>& keys, Millis within,
                                  std::vector<std::string>& missing) {
  std::unique_lock lk(m);
  auto all_there = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return kv.count(k) > 0; });
  };
  // In slices, so a client that went away does not hold its thread for the rest of its timeout.
  const Deadline dl = deadline_after(within);
  for (;;) {
    wait_until(cv, lk, std::min(dl, deadline_after(kWaitPoll)), [&] { return stopping || all_there(); });
    if (stopping || all_there() || Clock::now() >= dl) break;
    if (peer_gone(fd)) return false;
  }
  if (stopping) return false;
  for (const auto& k : keys)
    if (!kv.count(k)) missing.push_back(k);
  return true;
}

// Returns false when the connection should close without a reply (shutting down, or a protocol error).
bool StoreServer::Impl::handle(const Conn& c, ConnRole& role, const Message& req, Message& reply) {
  switch (req.op) {
    case Op::Set: set(req, reply); return true;
    case Op::Get:
    case Op::Wait: {
      const std::vector<std::string> keys = req.op == Op::Get ? std::vector<std::string>{req.key} : req.keys;
      std::vector<std::string> missing;
      if (!wait_keys(c.fd, keys, Millis(req.number), missing)) return false;
      reply.op = missing.empty() ? (req.op == Op::Get ? Op::Value : Op::Ok) : Op::Missing;
      reply.keys = std::move(missing);
      if (reply.op == Op::Value) {
        std::lock_guard lk(m);
        const auto it = kv.find(req.key);  // release_keys() may have run since the wait
        if (it != kv.end()) {
          reply.value = it->second;
        } else {
          reply.op = Op::Missing;
          reply.keys = {req.key};
        }
      }
      return true;
    }
    case Op::Hello: hello(c, role, req, reply); return true;
    case Op::Beat:
    case Op::Fail: {
      std::lock_guard lk(m);
      if (role.rank >= 0) ranks.at(role.rank).last_beat = Clock::now();
      if (req.op == Op::Fail) set_verdict_locked(who_locked(role, c) + " failed: " + req.text);
      reply.op = Op::Verdict;
      reply.text = verdict;
      return true;
    }
    case Op::Bye: {
      std::lock_guard lk(m);
      if (role.rank >= 0 && !role.bye) {
        role.bye = true;
        ranks.at(role.rank).bye = true;
        ++byes;
        cv.notify_all();
      }
      reply.op = Op::Ok;
      return true;
    }
    default:
      log_warn("rendezvous: closing the connection from " + c.peer + ": it sent a reply (" + op_name(req.op) +
               ") as a request");
      return false;
  }
}

void StoreServer::Impl::set(const Message& req, Message& reply) {
  std::lock_guard lk(m);
  const auto it = kv.find(req.key);
  const size_t freed = it == kv.end() ? 0 : it->first.size() + it->second.size();
  const size_t after = kv_bytes - freed + req.key.size() + req.value.size();
  if (after > limits.store_bytes) {
    reply.op = Op::Refused;
    reply.text = "the store is full: " + std::to_string(kv_bytes) + " bytes held, this SET would make " +
                 std::to_string(after) + " (limit " + std::to_string(limits.store_bytes) + ")";
    return;
  }
  kv[req.key] = req.value;
  kv_bytes = after;
  cv.notify_all();
  reply.op = Op::Ok;
}

void StoreServer::Impl::hello(const Conn& c, ConnRole& role, const Message& req, Message& reply) {
  std::lock_guard lk(m);
  const int64_t rank = req.number;
  reply.op = Op::Refused;
  if (role.rank >= 0) {
    reply.text = "this connection already said HELLO as rank " + std::to_string(role.rank);
  } else if (rank >= world) {
    reply.text = "rank " + std::to_string(rank) + " is out of range for a world of " + std::to_string(world);
  } else if (auto it = ranks.find(int(rank)); it != ranks.end()) {
    // Two processes with the same RANK: a launcher mistake that would otherwise hang the collectives.
    reply.text = "rank " + std::to_string(rank) + " already said HELLO from host " + it->second.host;
  } else {
    ranks[int(rank)] = RankState{req.text, Clock::now()};
    role.rank = int(rank);
    reply.op = Op::Ok;
    return;
  }
  log_warn("rendezvous: refused HELLO from " + c.peer + ": " + reply.text);
}

StoreServer::StoreServer(const std::string& bind_addr, int port, int world, Millis timeout, const std::string& token,
                         const StoreLimits& limits)
    : impl_(std::make_unique<Impl>()) {
  if (world < 1) fail(ErrorKind::InvalidInput, "rendezvous: world size " + std::to_string(world) + " (must be >= 1)");
  impl_->world = world;
  impl_->timeout = timeout;
  impl_->token = token;
  impl_->limits = limits;
  impl_->listen_fd = listen_on(bind_addr, port);
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
  impl_->port = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard lk(impl_->m);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->stop.fire();
  impl_->acceptor.join();
  for (auto& c : impl_->conns) {
    c->thread.join();
    ::close(c->fd);
  }
  ::close(impl_->listen_fd);
}

int StoreServer::port() const { return impl_->port; }

bool StoreServer::wait_all_bye(Millis timeout) {
  std::unique_lock lk(impl_->m);
  wait_until(impl_->cv, lk, deadline_after(timeout), [&] {
    return impl_->byes == impl_->world || !impl_->verdict.empty() || impl_->stopping;
  });
  return impl_->byes == impl_->world;
}

std::string StoreServer::verdict() const {
  std::lock_guard lk(impl_->m);
  return impl_->verdict;
}

void StoreServer::release_keys() {
  std::lock_guard lk(impl_->m);
  impl_->kv.clear();
  impl_->kv_bytes = 0;
}

size_t StoreServer::stored_bytes() const {
  std::lock_guard lk(impl_->m);
  return impl_->kv_bytes;
}

size_t StoreServer::serving_connections() const { return impl_->serving.load(); }

}  // namespace ar::dist
