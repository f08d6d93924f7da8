// StoreClient: one connection, one request at a time (a mutex around each request/reply pair, so Gloo
// and the caller may share it across threads). A transport failure closes the connection for good: the
// store lives in rank 0, and a job whose rank 0 is unreachable mid-rendezvous cannot continue anyway.
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "distributed/auth.h"
#include "distributed/store.h"
#include "distributed/store_frame.h"

namespace ar::dist {

using namespace frame;

struct StoreClient::Impl {
  std::string host;
  int port = 0;
  Millis timeout{0};
  std::mutex m;
  int fd = -1;  // -1 once the connection failed

  std::string where() const { return "rendezvous at " + host_port(host, port); }
  // Sends req and returns the reply, which must be one of `expected`. `server_wait`: how long the
  // server itself may hold the reply (GET/WAIT); the transport gets `timeout` on top of it.
  Message request(const Message& req, Millis server_wait, std::initializer_list<Op> expected);
};

namespace {

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

[[noreturn]] void fail_missing(const std::vector<std::string>& keys, Millis within) {
  fail(ErrorKind::Io, "rendezvous: key(s) " + quoted_list(keys) + " not set within " + seconds_text(within));
}

}  // namespace

Message StoreClient::Impl::request(const Message& req, Millis server_wait, std::initializer_list<Op> expected) {
  const std::string what = std::string(op_name(req.op)) + (req.key.empty() ? "" : " '" + req.key + "'");
  if (std::string why = check_request(req); !why.empty()) fail(ErrorKind::InvalidInput, where() + ": " + what + ": " + why);
  std::lock_guard lk(m);
  if (fd < 0) fail(ErrorKind::Io, where() + ": " + what + ": the connection failed earlier");
  Message reply;
  IoResult r = exchange(fd, req, reply, deadline_after(server_wait + timeout));
  if (r.ok() && std::find(expected.begin(), expected.end(), reply.op) == expected.end())
    r = {IoStatus::Malformed, std::string("unexpected reply ") + op_name(reply.op)};
  if (!r.ok()) {
    ::close(fd);
    fd = -1;
    fail(ErrorKind::Io, where() + ": " + what + ": " + r.describe());
  }
  return reply;
}

StoreClient::StoreClient(const std::string& host, int port, Millis timeout, const std::string& token, int rank)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->port = port;
  impl_->timeout = timeout;
  const std::string who = rank < 0 ? "" : " (rank " + std::to_string(rank) + ")";
  impl_->fd = auth::connect(host, port, timeout, token, rank < 0 ? kPlainClient : uint32_t(rank), impl_->where() + who);
}

StoreClient::~StoreClient() {
  if (impl_->fd >= 0) ::close(impl_->fd);
}

void StoreClient::set(const std::string& key, const std::vector<char>& data) {
  Message req;
  req.op = Op::Set;
  req.key = key;
  req.value.assign(data.begin(), data.end());
  const Message reply = impl_->request(req, Millis(0), {Op::Ok, Op::Refused});
  if (reply.op == Op::Refused) fail(ErrorKind::Io, impl_->where() + ": SET '" + key + "' refused: " + reply.text);
}

std::vector<char> StoreClient::get(const std::string& key) {
  Message req;
  req.op = Op::Get;
  req.key = key;
  req.number = clamp_ms(impl_->timeout);
  const Message reply = impl_->request(req, impl_->timeout, {Op::Value, Op::Missing});
  if (reply.op == Op::Missing) fail_missing({key}, impl_->timeout);
  return std::vector<char>(reply.value.begin(), reply.value.end());
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, impl_->timeout); }

void StoreClient::wait(const std::vector<std::string>& keys, const Millis& timeout) {
  Message req;
  req.op = Op::Wait;
  req.keys = keys;
  req.number = clamp_ms(timeout);
  const Message reply = impl_->request(req, timeout, {Op::Ok, Op::Missing});
  if (reply.op == Op::Missing) fail_missing(reply.keys, timeout);
}

}  // namespace ar::dist
