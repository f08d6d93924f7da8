// Fuzz target: rank 0's rendezvous server (src/distributed/store_server.cpp) as a peer on the network sees it,
// frame by frame over a real loopback connection. Input byte 0 chooses the peer: bit 0 set, a member
// that authenticates with the job token first (bit 1: claiming rank 1, else a plain store client);
// clear, a stranger. The rest is sent as raw bytes, then the peer closes its side and reads whatever
// comes back. One server serves every input (its state carries over, as a job's does).
//
// Beyond "no crash, no hang": after every input the server still serves a member (a SET and GET of a
// canary key), and a stranger's bytes change nothing of the job's state: not the verdict, not the
// stored bytes.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "distributed/auth.h"
#include "distributed/store.h"
#include "distributed/store_frame.h"
#include "fuzz_util.h"

namespace {

using namespace ar::dist;
using namespace std::chrono_literals;
namespace fr = ar::dist::frame;

const std::string kToken = "fuzz-job-token-0123456789abcdef";

StoreServer& server() {
  // Never destroyed: libFuzzer exits without unwinding, and a server joined at exit would only slow it.
  static StoreServer* s = [] {
    StoreLimits lim;
    lim.auth_deadline = 500ms;
    lim.store_bytes = 1u << 20;
    return new StoreServer("127.0.0.1", 0, 2, 1s, kToken, lim);
  }();
  return *s;
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz: FINDING: %s\n", what.c_str());
  std::abort();
}

// Reads until the server closes the connection. It must, soon: the peer has closed its side, and
// the server ends a connection at its peer's close (even inside a held GET). Its close comes after the
// connection's last effect on the job's state, so the checks below see that state settled.
void drain(int fd) {
  char buf[1];
  const fr::Deadline dl = fr::deadline_after(5s);
  fr::IoResult r;
  while ((r = fr::recv_exact(fd, buf, 1, dl)).ok()) {
  }
  if (r.status == fr::IoStatus::TimedOut) finding("the server kept a closed peer's connection open for 5 s");
}

void send_as_peer(const uint8_t* data, size_t size) {
  const bool member = data[0] & 1;
  const int fd = fr::connect_with_retries("127.0.0.1", server().port(), 2s);
  if (member) auth::client(fd, kToken, (data[0] & 2) ? 1u : kPlainClient, "fuzz member", fr::deadline_after(2s));
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  (void)fr::send_all(fd, rest, fr::deadline_after(2s));
  ::shutdown(fd, SHUT_WR);
  drain(fd);
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  return ar::fuzz::guarded([&] {
    StoreServer& s = server();
    if (s.stored_bytes() > (1u << 19)) s.release_keys();  // room for the members' SETs of the next inputs
    const std::string verdict = s.verdict();
    const size_t bytes = s.stored_bytes();
    send_as_peer(data, size);
    if (!(data[0] & 1) && (s.verdict() != verdict || s.stored_bytes() != bytes))
      finding("a stranger's bytes changed the job's state (verdict '" + s.verdict() + "', " +
              std::to_string(s.stored_bytes()) + " bytes stored, " + std::to_string(bytes) + " before)");
    {
      StoreClient canary("127.0.0.1", s.port(), 2s, kToken);
      canary.set("fuzz/canary", {'o', 'k'});
      if (canary.get("fuzz/canary") != std::vector<char>{'o', 'k'}) finding("the server stopped serving a member");
    }
    // The input ends when the server's threads for it have: one still running holds OpenSSL's
    // per-thread state, which LeakSanitizer's check at the end of an input could see half torn down.
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (s.serving_connections() > 0) {
      if (std::chrono::steady_clock::now() > until) finding("a closed connection's server thread ran on for 5 s");
      std::this_thread::sleep_for(100us);
    }
  });
}
