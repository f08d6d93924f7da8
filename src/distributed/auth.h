// The rendezvous's proof of membership (docs/distributed.md, "Threat model"). Every connection to rank
// 0's store runs one challenge-response before any other frame is read:
//
//   server -> CHALLENGE ns                       32 random bytes
//   client -> AUTH rank, nc, HMAC(k, "client", ns, nc)    rank: the claimed rank, or kPlainClient
//   server -> PROOF HMAC(k, "server", nc, ns)    or REFUSED "authentication failed", then it closes
//
// k is the job token (AR_JOB_TOKEN or --job_token_file), shared by every rank and never sent. The
// server learns that the client holds k; the client learns that the server does (so a foreign process
// on the port cannot pose as rank 0 and hand out forged mesh addresses). Both nonces are fresh per
// connection, so a recorded exchange replays nowhere. An empty token runs the same exchange with an
// empty key, which proves nothing: such a job is unauthenticated, and its store listens on
// MASTER_ADDR's interface only.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "distributed/store_frame.h"

namespace ar::dist {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;             // HMAC-SHA256
inline constexpr uint32_t kPlainClient = UINT32_MAX;  // AUTH's rank field for a store client (not a liveness link)
inline constexpr size_t kMinTokenBytes = 16;
inline constexpr size_t kMaxTokenBytes = 4096;

// The job token this process uses: --job_token_file's contents (trailing whitespace stripped) if given,
// else AR_JOB_TOKEN, else "" (an unauthenticated job). Refuses (InvalidInput, naming the source) a token
// shorter than kMinTokenBytes or longer than kMaxTokenBytes, and a token file that is not a readable
// regular file. `env` is the environment lookup (getenv in the CLI).
std::string job_token(const std::string& token_file, const std::function<std::optional<std::string>(const std::string&)>& env);

// A fresh random token (64 hex digits from the kernel's CSPRNG), for `autoround launch`.
std::string make_job_token();

namespace auth {
std::string nonce();  // kNonceBytes from getrandom(2)
// HMAC-SHA256(key, label || a || b).
std::string mac(std::string_view key, std::string_view label, std::string_view a, std::string_view b);
bool same(std::string_view a, std::string_view b);  // constant time in the contents

// Client side, right after connecting: runs the exchange on fd. Throws ar::Error naming `where`
// (InvalidInput when a token differs: "this rank's job token is not rank 0's"; Io for a transport
// failure) and leaves fd to the caller.
void client(int fd, std::string_view token, uint32_t rank, const std::string& where, frame::Deadline dl);

// Server side: the outcome of one connection's exchange.
struct Outcome {
  bool ok = false;
  uint32_t claimed_rank = kPlainClient;  // as the peer claimed it (unproven when !ok)
  std::string why;                       // for the log when !ok
};
// on_verified runs once the client's proof checked out, before this side's own proof is sent (the
// store counts the connection as a member's from then on, not as one awaiting authentication); when it
// returns false (the store gave the connection up meanwhile) the exchange fails with no proof sent.
Outcome server(int fd, std::string_view token, frame::Deadline dl, int stop_fd,
               const std::function<bool()>& on_verified = {});

// A rank's connection to the store at host:port, authenticated: connects (retrying while nothing
// listens) and runs client(), both until `timeout`. A connection the store closes before it is
// authenticated (its table of connections awaiting authentication was full, or a stranger's newer
// connection displaced it) is retried after a short pause, so strangers can delay a rank but not fail
// it; a refused token is not retried (InvalidInput). After `timeout`: Io naming `where` and the last
// reason. Returns the descriptor (the caller's to close).
int connect(const std::string& host, int port, std::chrono::milliseconds timeout, std::string_view token,
            uint32_t rank, const std::string& where);

// Frees the calling thread's OpenSSL state (its error queue, allocated by every HMAC) now, while the
// thread still runs: left to the thread-exit destructors, it races the leak checker's own (a false
// leak once in ~50k connections under the fuzzer). Called at the end of each server connection thread.
void thread_done();
}  // namespace auth

}  // namespace ar::dist
