// Liveness: the rank's own connection to the store (separate from the StoreClient, so a heartbeat is
// never queued behind a long GET), HELLO at construction, then BEAT every `interval` from a thread.
//
// Rank 0 unreachable: a closed or reset connection gives the verdict at once (the kernel closes the
// socket when rank 0's process dies, so there is nothing to wait for); a BEAT that gets no reply within
// `timeout` (rank 0 hung, or the network gone) gives it after `timeout`.
//
// Threads: `io` serializes request/reply pairs on the socket (the beat thread, report_failure, the BYE);
// `m` guards the verdict and the flags. The StopLatch cuts a BEAT exchange short when finish() runs, so
// finish() does not wait out a hung server's `timeout`.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "core/error.h"
#include "core/log.h"
#include "distributed/auth.h"
#include "distributed/store.h"
#include "distributed/store_frame.h"

namespace ar::dist {

using namespace frame;

namespace {
// A BYE or FAIL to a server that does not answer gives up after this (or `timeout` if shorter).
constexpr Millis kFinalExchange{10000};
}  // namespace

struct Liveness::Impl {
  std::string host;
  int port = 0;
  int rank = 0;
  Millis interval{0}, timeout{0};
  std::function<void(const std::string&)> on_verdict;
  StopLatch stop;

  std::mutex io;   // guards fd and broken
  int fd = -1;
  bool broken = false;  // the connection failed: nothing more is sent on it

  mutable std::mutex m;  // guards the fields below
  std::condition_variable cv;
  bool stopping = false, finished = false;
  bool quiet = false;  // report_failure ran: this rank knows its failure, the callback stays silent
  std::string verdict;
  std::thread beater;

  void hello(const std::string& my_host);
  void run();
  bool beat();  // false: stop beating (a verdict, or stopping)
  void deliver(const std::string& v);
  void say_bye();
  Millis final_wait() const { return std::min(timeout, kFinalExchange); }
};

void Liveness::Impl::hello(const std::string& my_host) {
  Message req, reply;
  req.op = Op::Hello;
  req.number = uint32_t(rank);
  req.text = my_host;
  const std::string where = "rendezvous at " + host_port(host, port) + ": HELLO of rank " + std::to_string(rank);
  if (rank < 0) fail(ErrorKind::InvalidInput, where + ": negative rank");
  if (std::string why = check_request(req); !why.empty()) fail(ErrorKind::InvalidInput, where + ": " + why);
  const IoResult r = exchange(fd, req, reply, deadline_after(timeout));
  if (!r.ok()) fail(ErrorKind::Io, where + ": " + r.describe());
  if (reply.op == Op::Refused) fail(ErrorKind::InvalidInput, where + " refused: " + reply.text);
  if (reply.op != Op::Ok) fail(ErrorKind::Io, where + ": unexpected reply " + op_name(reply.op));
}

void Liveness::Impl::run() {
  for (;;) {
    {
      std::unique_lock lk(m);
      cv.wait_for(lk, interval, [&] { return stopping; });
      if (stopping) return;
    }
    if (!beat()) return;
  }
}

bool Liveness::Impl::beat() {
  Message req, reply;
  req.op = Op::Beat;
  IoResult r;
  {
    std::lock_guard lk(io);
    if (broken) return false;
    r = exchange(fd, req, reply, deadline_after(timeout), stop.fd());
    // Stopped mid-exchange leaves a reply in flight; say_bye() skips it.
    if (!r.ok() && r.status != IoStatus::Stopped) broken = true;
  }
  if (r.status == IoStatus::Stopped) return false;
  const std::string rank0 = "rank 0 (host " + host + ") lost: ";
  if (r.status == IoStatus::TimedOut) {
    deliver(rank0 + "the rendezvous did not answer for " + seconds_text(timeout));
    return false;
  }
  if (!r.ok() || reply.op != Op::Verdict) {
    deliver(rank0 + "rendezvous connection closed");
    return false;
  }
  if (!reply.text.empty()) {
    deliver(reply.text);
    return false;
  }
  return true;
}

void Liveness::Impl::deliver(const std::string& v) {
  {
    std::lock_guard lk(m);
    if (!verdict.empty()) return;
    verdict = v;
    if (quiet) return;
  }
  try {
    on_verdict(v);
  } catch (const std::exception& e) {  // an escaping exception would terminate the beat thread's process
    log_warn("rendezvous: the verdict handler threw: " + std::string(e.what()));
  }
}

void Liveness::Impl::say_bye() {
  std::lock_guard lk(io);
  if (broken || fd < 0) return;
  Message req;
  req.op = Op::Bye;
  const Deadline dl = deadline_after(final_wait());
  IoResult r = send_all(fd, encode(req), dl);
  // Read up to the OK: a BEAT reply cut short by finish() may come first. Waiting for the OK (rather
  // than closing right after sending) matters: closing with unread bytes makes the kernel send a reset,
  // which can discard the BYE before the server has read it.
  Message reply;
  while (r.ok() && reply.op != Op::Ok) r = recv_message(fd, reply, dl);
  if (!r.ok()) log_warn("rendezvous at " + host_port(host, port) + ": BYE of rank " + std::to_string(rank) + ": " +
                        r.describe());
}

Liveness::Liveness(const std::string& host, int port, int rank, const std::string& my_host, Millis interval,
                   Millis timeout, std::function<void(const std::string&)> on_verdict, const std::string& token)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.host = host;
  s.port = port;
  s.rank = rank;
  s.interval = interval;
  s.timeout = timeout;
  s.on_verdict = std::move(on_verdict);
  s.fd = auth::connect(host, port, timeout, token, uint32_t(std::max(rank, 0)),
                       "rendezvous at " + host_port(host, port) + " (rank " + std::to_string(rank) + ")");
  try {
    s.hello(my_host);
  } catch (...) {
    ::close(s.fd);
    throw;
  }
  s.beater = std::thread([&s] { s.run(); });
}

Liveness::~Liveness() {
  try {
    finish();
  } catch (const std::exception& e) {
    log_warn(std::string("rendezvous: liveness shutdown: ") + e.what());
  } catch (...) {
  }
}

void Liveness::finish() {
  Impl& s = *impl_;
  {
    std::lock_guard lk(s.m);
    if (s.finished) return;
    s.finished = s.stopping = true;
  }
  s.cv.notify_all();
  s.stop.fire();
  // The handler runs on the beat thread: calling finish() from it would join that thread from itself.
  AR_CHECK(std::this_thread::get_id() != s.beater.get_id(), "Liveness::finish called from its on_verdict handler");
  s.beater.join();
  if (verdict().empty()) s.say_bye();  // with a verdict the job is over: no clean end to report
  std::lock_guard lk(s.io);
  ::close(s.fd);
  s.fd = -1;
}

void Liveness::report_failure(const std::string& message) {
  Impl& s = *impl_;
  {
    std::lock_guard lk(s.m);
    s.quiet = true;
  }
  Message req, reply;
  req.op = Op::Fail;
  req.text = message.substr(0, kMaxKey);  // a verdict is one line for every rank's log, not a dump
  std::lock_guard lk(s.io);
  if (s.broken || s.fd < 0) return;
  const IoResult r = exchange(s.fd, req, reply, deadline_after(s.final_wait()));
  if (!r.ok() || reply.op != Op::Verdict) {
    s.broken = true;
    log_warn("rendezvous at " + host_port(s.host, s.port) + ": FAIL of rank " + std::to_string(s.rank) + ": " +
             (r.ok() ? std::string("unexpected reply ") + op_name(reply.op) : r.describe()));
    return;
  }
  std::lock_guard lv(s.m);
  if (s.verdict.empty()) s.verdict = reply.text;
}

std::string Liveness::verdict() const {
  std::lock_guard lk(impl_->m);
  return impl_->verdict;
}

}  // namespace ar::dist
