#include "distributed/store_frame.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace ar::dist::frame {

namespace {

// Bounds-checked cursor over a payload; the first problem is kept and every later read fails.
struct Reader {
  std::string_view rest;
  std::string error;

  bool fail(std::string why) {
    if (error.empty()) error = std::move(why);
    return false;
  }
  bool u32(uint32_t& v, const char* field) {
    if (!error.empty()) return false;
    if (rest.size() < 4) return fail(std::string("truncated ") + field);
    v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(rest[size_t(i)]);
    rest.remove_prefix(4);
    return true;
  }
  bool str(std::string& s, const char* field, uint32_t limit) {
    uint32_t n = 0;
    if (!u32(n, field)) return false;
    if (n > limit)
      return fail(std::string(field) + " of " + std::to_string(n) + " bytes exceeds the limit of " +
                  std::to_string(limit));
    if (rest.size() < n)
      return fail(std::string("truncated ") + field + " (" + std::to_string(n) + " bytes announced, " +
                  std::to_string(rest.size()) + " left)");
    s.assign(rest.data(), n);
    rest.remove_prefix(n);
    return true;
  }
  bool fixed(std::string& s, const char* field, uint32_t n) {
    if (!str(s, field, n)) return false;
    if (s.size() != n) return fail(std::string(field) + " of " + std::to_string(s.size()) + " bytes (must be " + std::to_string(n) + ")");
    return true;
  }
  bool strings(std::vector<std::string>& out, const char* field) {
    uint32_t count = 0;
    if (!u32(count, field)) return false;
    // Each string needs at least its 4-byte length: a count beyond that is a lie, refused before any
    // allocation sized by it. The cap keeps a 64 MiB frame of empty keys from costing 0.5 GiB.
    if (count > kMaxKeys)
      return fail(std::string(field) + " " + std::to_string(count) + " exceeds the limit of " + std::to_string(kMaxKeys));
    if (count > rest.size() / 4)
      return fail(std::string("truncated ") + field + " (" + std::to_string(count) + " announced)");
    out.resize(count);
    for (auto& s : out)
      if (!str(s, "key", kMaxKey)) return false;
    return true;
  }
};

struct Writer {
  std::string out;
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i, v >>= 8) out.push_back(char(v & 0xff));
  }
  void str(const std::string& s) {
    u32(uint32_t(s.size()));
    out += s;
  }
};

void read_fields(Reader& r, Message& m) {
  switch (m.op) {
    case Op::Set: (void)(r.str(m.key, "key", kMaxKey) && r.str(m.value, "value", kMaxValue)); break;
    case Op::Get: (void)(r.u32(m.number, "timeout") && r.str(m.key, "key", kMaxKey)); break;
    case Op::Wait: (void)(r.u32(m.number, "timeout") && r.strings(m.keys, "key count")); break;
    case Op::Missing: (void)(r.strings(m.keys, "key count")); break;
    case Op::Hello: (void)(r.u32(m.number, "rank") && r.str(m.text, "host", kMaxKey)); break;
    case Op::Fail:
    case Op::Verdict:
    case Op::Refused: (void)(r.str(m.text, "text", kMaxText)); break;
    case Op::Value: (void)(r.str(m.value, "value", kMaxValue)); break;
    case Op::Auth:
      (void)(r.u32(m.number, "rank") && r.fixed(m.key, "nonce", kAuthBytes) && r.fixed(m.value, "mac", kAuthBytes));
      break;
    case Op::Challenge: (void)(r.fixed(m.value, "nonce", kAuthBytes)); break;
    case Op::Proof: (void)(r.fixed(m.value, "mac", kAuthBytes)); break;
    case Op::Beat:
    case Op::Bye:
    case Op::Ok: break;
  }
}

bool known(Op op) { return std::string_view(op_name(op)) != "?"; }

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::Set: return "SET";
    case Op::Get: return "GET";
    case Op::Wait: return "WAIT";
    case Op::Hello: return "HELLO";
    case Op::Beat: return "BEAT";
    case Op::Fail: return "FAIL";
    case Op::Bye: return "BYE";
    case Op::Ok: return "OK";
    case Op::Value: return "VALUE";
    case Op::Missing: return "MISSING";
    case Op::Verdict: return "VERDICT";
    case Op::Refused: return "REFUSED";
    case Op::Auth: return "AUTH";
    case Op::Challenge: return "CHALLENGE";
    case Op::Proof: return "PROOF";
  }
  return "?";
}

uint32_t max_payload(Op op) {
  constexpr uint32_t str = 4;  // a string's length field
  switch (op) {
    case Op::Set: return kMaxFrame;
    case Op::Get: return 1 + 4 + str + kMaxKey;
    case Op::Hello: return 1 + 4 + str + kMaxKey;
    case Op::Wait:
    case Op::Missing: return kMaxList;
    case Op::Fail:
    case Op::Verdict:
    case Op::Refused: return 1 + str + kMaxText;
    case Op::Value: return 1 + str + kMaxValue;
    case Op::Auth: return 1 + 4 + 2 * (str + kAuthBytes);
    case Op::Challenge:
    case Op::Proof: return 1 + str + kAuthBytes;
    case Op::Beat:
    case Op::Bye:
    case Op::Ok: return 1;
  }
  return 0;
}

Decoded decode(std::string_view payload) {
  Decoded d;
  if (payload.size() > kMaxFrame) {
    d.error = check_frame_length(uint32_t(std::min<size_t>(payload.size(), UINT32_MAX)));
    return d;
  }
  if (payload.empty()) {
    d.error = "empty frame (no op)";
    return d;
  }
  d.msg.op = Op(uint8_t(payload[0]));
  if (!known(d.msg.op)) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "unknown op 0x%02x", unsigned(uint8_t(payload[0])));
    d.error = buf;
    d.msg = {};
    return d;
  }
  if (std::string why = check_frame(uint8_t(payload[0]), uint32_t(payload.size())); !why.empty()) {
    d.error = why;
    d.msg = {};
    return d;
  }
  Reader r{payload.substr(1), {}};
  read_fields(r, d.msg);
  if (r.error.empty() && !r.rest.empty())
    r.error = std::to_string(r.rest.size()) + " trailing byte(s) after the fields";
  if (!r.error.empty()) {
    d.error = std::string(op_name(d.msg.op)) + ": " + r.error;
    d.msg = {};
  }
  return d;
}

std::string encode(const Message& m) {
  Writer w;
  w.u32(0);  // the length, patched below
  w.out.push_back(char(m.op));
  switch (m.op) {
    case Op::Set: w.str(m.key), w.str(m.value); break;
    case Op::Get: w.u32(m.number), w.str(m.key); break;
    case Op::Wait: w.u32(m.number); [[fallthrough]];
    case Op::Missing:
      w.u32(uint32_t(m.keys.size()));  // within kMaxKeys: check_request (clients) / a decoded WAIT (server)
      for (const auto& k : m.keys) w.str(k);
      break;
    case Op::Hello: w.u32(m.number), w.str(m.text); break;
    case Op::Fail:
    case Op::Verdict:
    case Op::Refused: w.str(m.text); break;
    case Op::Value: w.str(m.value); break;
    case Op::Auth: w.u32(m.number), w.str(m.key), w.str(m.value); break;
    case Op::Challenge:
    case Op::Proof: w.str(m.value); break;
    case Op::Beat:
    case Op::Bye:
    case Op::Ok: break;
  }
  const uint32_t n = uint32_t(w.out.size() - 4);
  for (size_t i = 0; i < 4; ++i) w.out[i] = char((n >> (8 * i)) & 0xff);
  return w.out;
}

std::string check_request(const Message& m) {
  auto key_ok = [](const std::string& k) { return k.size() <= kMaxKey; };
  if (!key_ok(m.key)) return "key of " + std::to_string(m.key.size()) + " bytes exceeds " + std::to_string(kMaxKey);
  if (m.keys.size() > kMaxKeys)
    return std::to_string(m.keys.size()) + " keys exceed the limit of " + std::to_string(kMaxKeys) + " per request";
  for (const auto& k : m.keys)
    if (!key_ok(k)) return "key of " + std::to_string(k.size()) + " bytes exceeds " + std::to_string(kMaxKey);
  if (m.op == Op::Hello && m.text.size() > kMaxKey)
    return "host name of " + std::to_string(m.text.size()) + " bytes exceeds " + std::to_string(kMaxKey);
  const size_t payload = encode(m).size() - 4;
  return check_frame(uint8_t(m.op), uint32_t(std::min<size_t>(payload, UINT32_MAX)));
}

std::string check_frame_length(uint32_t length) {
  if (length <= kMaxFrame) return "";
  return "frame of " + std::to_string(length) + " bytes exceeds the limit of " + std::to_string(kMaxFrame);
}

std::string check_frame(uint8_t op, uint32_t length) {
  if (length == 0) return "empty frame (no op)";
  const uint32_t limit = max_payload(Op(op));
  if (limit == 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "unknown op 0x%02x", unsigned(op));
    return buf;
  }
  if (length <= limit) return "";
  return std::string(op_name(Op(op))) + " frame of " + std::to_string(length) + " bytes exceeds its limit of " +
         std::to_string(limit);
}

// ---- sockets ----

std::string IoResult::describe() const {
  switch (status) {
    case IoStatus::Ok: return "ok";
    case IoStatus::Closed: return what.empty() ? "connection closed by the peer" : "connection closed (" + what + ")";
    case IoStatus::TimedOut: return "timed out";
    case IoStatus::Stopped: return "stopped";
    case IoStatus::Failed: return what;
    case IoStatus::Malformed: return "malformed frame (" + what + ")";
  }
  return what;
}

StopLatch::StopLatch() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) fail(ErrorKind::Io, "rendezvous: cannot create a pipe: " + errno_text(errno));
  read_fd_ = fds[0];
  write_fd_ = fds[1];
}

StopLatch::~StopLatch() {
  ::close(read_fd_);
  ::close(write_fd_);
}

void StopLatch::fire() {
  const char b = 1;
  // The byte is never read, so one is enough; a full pipe (EAGAIN) means it is already fired.
  while (::write(write_fd_, &b, 1) < 0 && errno == EINTR) {
  }
}

bool StopLatch::fired() const {
  pollfd p{read_fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

namespace {

// Waits for `events` on fd: Ok (ready, or an error condition the next call will report), TimedOut,
// Stopped (stop_fd readable) or Failed.
IoResult wait_ready(int fd, short events, Deadline dl, int stop_fd) {
  for (;;) {
    int ms = -1;
    if (dl != kNoDeadline) {
      const auto left = dl - Clock::now();
      if (left <= Clock::duration::zero()) return {IoStatus::TimedOut, {}};
      ms = int(std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), 3600 * 1000));
    }
    pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int r = ::poll(p, stop_fd >= 0 ? 2 : 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return {IoStatus::Failed, "poll: " + errno_text(errno)};
    }
    if (stop_fd >= 0 && p[1].revents) return {IoStatus::Stopped, {}};
    if (r > 0 && p[0].revents) return {};
  }
}

IoResult from_errno(int e) {
  if (e == ECONNRESET || e == EPIPE) return {IoStatus::Closed, errno_text(e)};
  return {IoStatus::Failed, errno_text(e)};
}

}  // namespace

IoResult send_all(int fd, std::string_view bytes, Deadline dl, int stop_fd) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (IoResult w = wait_ready(fd, POLLOUT, dl, stop_fd); !w.ok()) return w;
      continue;
    }
    return from_errno(n < 0 ? errno : EPIPE);
  }
  return {};
}

IoResult recv_exact(int fd, char* buf, size_t n, Deadline dl, int stop_fd) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, buf, n, MSG_DONTWAIT);
    if (got > 0) {
      buf += got;
      n -= size_t(got);
      continue;
    }
    if (got == 0) return {IoStatus::Closed, {}};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (IoResult w = wait_ready(fd, POLLIN, dl, stop_fd); !w.ok()) return w;
      continue;
    }
    return from_errno(errno);
  }
  return {};
}

IoResult recv_message(int fd, Message& out, const RecvLimits& lim, int stop_fd) {
  unsigned char head[5];  // the length prefix and the op byte
  if (IoResult r = recv_exact(fd, reinterpret_cast<char*>(head), 1, std::min(lim.start, lim.whole), stop_fd); !r.ok())
    return r;
  const Deadline dl = lim.frame.count() > 0 ? std::min(lim.whole, deadline_after(lim.frame)) : lim.whole;
  if (IoResult r = recv_exact(fd, reinterpret_cast<char*>(head) + 1, 3, dl, stop_fd); !r.ok()) return r;
  const uint32_t n = uint32_t(head[0]) | uint32_t(head[1]) << 8 | uint32_t(head[2]) << 16 | uint32_t(head[3]) << 24;
  if (n == 0) return {IoStatus::Malformed, "empty frame (no op)"};
  if (IoResult r = recv_exact(fd, reinterpret_cast<char*>(head) + 4, 1, dl, stop_fd); !r.ok()) return r;
  if (lim.auth_only && Op(head[4]) != Op::Auth) {
    char op[16];
    std::snprintf(op, sizeof op, "0x%02x", unsigned(head[4]));
    return {IoStatus::Malformed, std::string("a frame of op ") + op + " (" + op_name(Op(head[4])) + ") before authentication"};
  }
  if (std::string why = check_frame(head[4], n); !why.empty()) return {IoStatus::Malformed, why};
  // Grown as the bytes arrive (1 MiB at a time): memory follows what the peer sent, not what it announced.
  std::string payload(1, char(head[4]));
  while (payload.size() < n) {
    const size_t have = payload.size(), step = std::min<size_t>(n - have, 1u << 20);
    payload.resize(have + step);
    if (IoResult r = recv_exact(fd, payload.data() + have, step, dl, stop_fd); !r.ok()) return r;
  }
  Decoded d = decode(payload);
  if (!d.ok()) return {IoStatus::Malformed, d.error};
  out = std::move(d.msg);
  return {};
}

IoResult recv_message(int fd, Message& out, Deadline dl, int stop_fd) {
  RecvLimits lim;
  lim.start = lim.whole = dl;
  return recv_message(fd, out, lim, stop_fd);
}

IoResult exchange(int fd, const Message& request, Message& reply, Deadline dl, int stop_fd) {
  if (IoResult r = send_all(fd, encode(request), dl, stop_fd); !r.ok()) return r;
  return recv_message(fd, reply, dl, stop_fd);
}

namespace {

// One connection attempt to every address of host; the socket on success, else -1 with `why` set.
int try_connect(const std::string& host, int port, Deadline dl, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (g != 0) {
    why = std::string("cannot resolve '") + host + "': " + ::gai_strerror(g);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = errno_text(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        const IoResult w = wait_ready(fd, POLLOUT, dl, -1);
        socklen_t len = sizeof err;
        err = w.ok() ? (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : errno) : ETIMEDOUT;
      }
    }
    if (err != 0) {
      // An attempt cut short by our own deadline keeps the reason of the attempts before it
      // ("Connection refused" says more than "timed out").
      if (err != ETIMEDOUT || why.empty()) why = errno_text(err);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;  // small request/reply frames: no Nagle delay
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

int connect_with_retries(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const Deadline dl = deadline_after(timeout);
  std::string why;
  // A name that does not exist stays so: fail now instead of retrying for the whole --timeout. Only
  // EAI_AGAIN (the resolver could not answer now) is worth waiting for; it and success go on below.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (res) ::freeaddrinfo(res);
  if (g != 0 && g != EAI_AGAIN && g != EAI_SYSTEM && g != EAI_MEMORY)
    fail(ErrorKind::InvalidInput, "cannot resolve the rendezvous address '" + host + "' (MASTER_ADDR): " +
                                      ::gai_strerror(g));
  for (;;) {
    const int fd = try_connect(host, port, dl, why);
    if (fd >= 0) return fd;
    const auto now = Clock::now();
    if (now >= dl) break;
    // Rank 0 may start its server after the others try: retry at a pace that costs nothing.
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(150), dl - now));
  }
  fail(ErrorKind::Io, "cannot reach the rendezvous at " + host_port(host, port) + " within " + seconds_text(timeout) +
                          ": " + (why.empty() ? "timed out" : why));
}

std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", double(d.count()) / 1000.0);
  return buf;
}

Deadline deadline_after(std::chrono::milliseconds d) {
  if (d.count() <= 0) return Clock::now();
  if (d > std::chrono::hours(24 * 365 * 10)) return kNoDeadline;
  return Clock::now() + d;
}

uint32_t clamp_ms(std::chrono::milliseconds d) {
  return uint32_t(std::clamp<int64_t>(d.count(), 0, int64_t(UINT32_MAX)));
}

}  // namespace ar::dist::frame
