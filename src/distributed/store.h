// The job's rendezvous and liveness service, served by global rank 0 at MASTER_ADDR:MASTER_PORT over
// plain TCP (Gloo ships no TCP key-value store; PyTorch's TCPStore is not a library we can use).
//
// Every connection first proves that it holds the job token (distributed/auth.h); until then its bytes reach
// nothing but the authentication, and a connection that fails it is dropped with a log line.
//
// Protocol (little-endian, one request -> one reply per frame): u32 length + payload; payload = u8 op
// + fields, strings as u32 length + bytes. Ops: SET key value; GET key (the reply waits until the key
// exists or the request's timeout passes); WAIT keys...; HELLO rank host (liveness registration);
// BEAT (heartbeat; the reply carries the job's verdict); FAIL message (this rank failed: tell everyone);
// BYE (clean end of this rank). Every read of a peer's bytes is bounds-checked: a malformed frame,
// an oversized length (> 64 MiB) or a foreign client closes that connection with a logged reason, never
// a crash.
//
// Liveness: a rank whose HELLO connection closes without BYE, or whose heartbeats stop for `timeout`,
// is lost; the first loss or FAIL becomes the job's verdict ("rank 3 (host b) lost: connection closed"),
// returned to every rank on its next BEAT. The server never decides anything else.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace ar::dist {

using Millis = std::chrono::milliseconds;

struct StoreLimits {
  size_t pending = 64;          // connections not yet authenticated, in all
  size_t pending_per_peer = 8;  // the same from one address
  size_t connections = 0;       // authenticated connections in all; 0 = 4 x world + 16
  Millis auth_deadline{10000};  // to finish authenticating (or `timeout` if shorter)
  size_t store_bytes = 256u << 20;  // keys and values held at once
};

class StoreServer {
 public:
  // Listens on bind_addr:port (bind_addr "" = every interface). `world` ranks are expected to say
  // HELLO. `token`: the job's secret ("" = unauthenticated). Errors (ar::Error, InvalidInput/Io): the
  // port in use or not bindable, naming addr:port.
  StoreServer(const std::string& bind_addr, int port, int world, Millis timeout, const std::string& token,
              const StoreLimits& limits = {});
  ~StoreServer();  // stops serving, closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;  // the bound port (useful with port 0 in tests)
  // Waits until every rank said BYE, a verdict exists or `timeout` passes; true when all said BYE.
  bool wait_all_bye(Millis timeout);
  std::string verdict() const;  // "" while the job is healthy
  // The rendezvous is over (every rank read what it needed): frees every key. Later SETs are stored again.
  void release_keys();
  size_t stored_bytes() const;  // keys + values held now
  // Connections whose serving thread has not finished yet (it frees its OpenSSL state last).
  size_t serving_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A rank's connection to the store, usable as Gloo's rendezvous store. Connecting retries until
// `timeout` and then fails with "cannot reach the rendezvous at host:port within N s: <reason>"; then
// it authenticates with `token` (a different token than the server's is an InvalidInput error).
// get() and wait() fail with an error naming the missing keys after their timeout.
class StoreClient : public gloo::rendezvous::Store {
 public:
  // `rank`: this process's rank, named in errors and claimed in the authentication (-1: a plain client).
  StoreClient(const std::string& host, int port, Millis timeout, const std::string& token, int rank = -1);
  ~StoreClient() override;
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A rank's liveness link: its own connection to the store, HELLO(rank, host), then a heartbeat every
// `interval` from a background thread. `on_verdict` is called once, from that thread, when the job has
// a verdict (another rank lost or failed) or when the server is unreachable for `timeout`
// ("rank 0 (host a) lost: rendezvous connection closed"). finish() says BYE and stops the thread;
// report_failure() sends FAIL so the others learn of this rank's error at once.
class Liveness {
 public:
  Liveness(const std::string& host, int port, int rank, const std::string& my_host, Millis interval, Millis timeout,
           std::function<void(const std::string&)> on_verdict, const std::string& token);
  ~Liveness();  // finish() if not done
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;
  void finish();
  void report_failure(const std::string& message);
  std::string verdict() const;  // the verdict seen so far, "" if none

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ar::dist
