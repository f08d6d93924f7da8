#include "distributed/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace ar::dist {

using namespace frame;

namespace {

std::string check_token(std::string token, const std::string& source) {
  if (token.size() < kMinTokenBytes)
    fail(ErrorKind::InvalidInput, source + ": a job token of " + std::to_string(token.size()) + " bytes is too short (at least " +
                                      std::to_string(kMinTokenBytes) + "; e.g. `openssl rand -hex 32`)");
  if (token.size() > kMaxTokenBytes)
    fail(ErrorKind::InvalidInput, source + ": a job token of more than " + std::to_string(kMaxTokenBytes) + " bytes");
  return token;
}

std::string read_token_file(const std::string& path) {
  const std::string source = "--job_token_file " + path;
  // O_NONBLOCK: a FIFO named here must not block the open; it is refused below as not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(ErrorKind::InvalidInput, source + ": " + std::strerror(errno));
  struct stat st {};
  std::string bytes;
  bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular) {
    char buf[kMaxTokenBytes + 64];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && bytes.size() <= kMaxTokenBytes + 64) bytes.append(buf, size_t(n));
  }
  ::close(fd);
  if (!regular) fail(ErrorKind::InvalidInput, source + ": not a regular file");
  if (st.st_mode & (S_IRGRP | S_IROTH))
    log_warn(source + ": readable by other users of this machine (chmod 600 keeps the job token private)");
  while (!bytes.empty() && std::strchr(" \t\r\n", bytes.back())) bytes.pop_back();
  return check_token(std::move(bytes), source);
}

void random_bytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n) {
    const ssize_t got = ::getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail(ErrorKind::Io, std::string("getrandom: ") + std::strerror(errno));
    p += got;
    n -= size_t(got);
  }
}

Message refused(std::string why) {
  Message m;
  m.op = Op::Refused;
  m.text = std::move(why);
  return m;
}

}  // namespace

std::string job_token(const std::string& token_file,
                      const std::function<std::optional<std::string>(const std::string&)>& env) {
  if (!token_file.empty()) return read_token_file(token_file);
  if (auto t = env("AR_JOB_TOKEN"); t && !t->empty()) return check_token(*t, "AR_JOB_TOKEN");
  return "";
}

std::string make_job_token() {
  unsigned char raw[32];
  random_bytes(raw, sizeof raw);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : raw) s += {kHex[b >> 4], kHex[b & 15]};
  return s;
}

namespace auth {

std::string nonce() {
  std::string n(kNonceBytes, '\0');
  random_bytes(n.data(), n.size());
  return n;
}

std::string mac(std::string_view key, std::string_view label, std::string_view a, std::string_view b) {
  std::string msg;
  msg.reserve(label.size() + 1 + a.size() + b.size());
  msg.append(label).push_back('\0');
  msg.append(a).append(b);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  static constexpr unsigned char kNoKey = 0;  // HMAC() reads a null key as "reuse the last one"
  const void* k = key.empty() ? static_cast<const void*>(&kNoKey) : key.data();
  if (!HMAC(EVP_sha256(), k, int(key.size()), reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
            &len) ||
      len != kMacBytes)
    fail(ErrorKind::Internal, "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), len);
}

void thread_done() { OPENSSL_thread_stop(); }

bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void client(int fd, std::string_view token, uint32_t rank, const std::string& where, Deadline dl) {
  Message challenge;
  IoResult r = recv_message(fd, challenge, dl);
  if (r.ok() && challenge.op != Op::Challenge) r = {IoStatus::Malformed, std::string("expected a challenge, got ") + op_name(challenge.op)};
  if (!r.ok()) fail(ErrorKind::Io, where + ": authentication: " + r.describe());
  Message req;
  req.op = Op::Auth;
  req.number = rank;
  req.key = nonce();
  req.value = mac(token, "client", challenge.value, req.key);
  Message reply;
  r = exchange(fd, req, reply, dl);
  if (!r.ok()) fail(ErrorKind::Io, where + ": authentication: " + r.describe());
  if (reply.op == Op::Refused)
    fail(ErrorKind::InvalidInput, where + " refused this rank's job token: every rank of a job needs the same "
                                          "AR_JOB_TOKEN (or --job_token_file) as rank 0");
  if (reply.op != Op::Proof || !same(reply.value, mac(token, "server", req.key, challenge.value)))
    fail(ErrorKind::InvalidInput, where + " did not prove that it holds this job's token (another job on this port, "
                                          "or rank 0 started with a different AR_JOB_TOKEN)");
}

Outcome server(int fd, std::string_view token, Deadline dl, int stop_fd, const std::function<bool()>& on_verified) {
  Outcome out;
  Message challenge;
  challenge.op = Op::Challenge;
  challenge.value = nonce();
  if (IoResult r = send_all(fd, encode(challenge), dl, stop_fd); !r.ok()) {
    out.why = r.describe();
    return out;
  }
  Message req;
  RecvLimits lim;
  lim.start = lim.whole = dl;
  lim.auth_only = true;
  if (IoResult r = recv_message(fd, req, lim, stop_fd); !r.ok()) {
    out.why = r.status == IoStatus::TimedOut ? "no authentication within the deadline" : r.describe();
    return out;
  }
  out.claimed_rank = req.number;
  if (!same(req.value, mac(token, "client", challenge.value, req.key))) {
    out.why = "wrong job token";
    send_all(fd, encode(refused("authentication failed")), dl, stop_fd);
    return out;
  }
  if (on_verified && !on_verified()) {
    out.why = "closed for a newer connection while it authenticated";
    return out;
  }
  Message proof;
  proof.op = Op::Proof;
  proof.value = mac(token, "server", req.key, challenge.value);
  if (IoResult r = send_all(fd, encode(proof), dl, stop_fd); !r.ok()) {
    out.why = r.describe();
    return out;
  }
  out.ok = true;
  return out;
}

int connect(const std::string& host, int port, std::chrono::milliseconds timeout, std::string_view token,
            uint32_t rank, const std::string& where) {
  const Deadline dl = deadline_after(timeout);
  std::chrono::milliseconds pause{20};
  for (int attempt = 1;; ++attempt) {
    // The first connection gets the whole timeout (its error names it); a retry what is left of it.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(dl - Clock::now());
    const int fd = connect_with_retries(host, port, attempt == 1 ? timeout : std::max(left, std::chrono::milliseconds(1)));
    try {
      client(fd, token, rank, where, dl);
      return fd;
    } catch (const Error& e) {
      ::close(fd);
      const auto now = Clock::now();
      if (e.kind() != ErrorKind::Io) throw;  // a token refused or unproven: another try says the same
      if (now + pause >= dl)
        fail(ErrorKind::Io, std::string(e.what()) + " (" + std::to_string(attempt) + " attempt" +
                                (attempt > 1 ? "s" : "") + " within " + seconds_text(timeout) + ")");
      if ((attempt & (attempt - 1)) == 0) log_warn(std::string(e.what()) + "; retrying");  // attempts 1, 2, 4, ...
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }
}

}  // namespace auth
}  // namespace ar::dist
