// The rendezvous store and liveness service (src/distributed/store*.cpp, liveness.cpp): the frame decoder's
// refusals, key-value semantics across clients, connect/bind errors, a real Gloo rendezvous through the
// store, and the liveness verdicts (a SIGKILLed rank in a child process, FAIL, silence, rank 0 gone).
// Every server listens on port 0 (the kernel's choice), so tests never collide.
#include <gtest/gtest.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "core/error.h"
#include "distributed/auth.h"
#include "distributed/store.h"
#include "distributed/store_frame.h"
#include "slowloris.h"

extern char** environ;

namespace {

using namespace ar::dist;
using namespace std::chrono_literals;
namespace fr = ar::dist::frame;
using fr::Clock;

const std::string kLocal = "127.0.0.1";
const std::string kToken = "store-test-token-0123456789abcdef";  // the job secret of every test here

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}
std::string str(const std::string& s) { return le32(uint32_t(s.size())) + s; }
std::string op(fr::Op o) { return std::string(1, char(o)); }
// "k3"; spelled with append() because GCC 12's -Wrestrict misfires on numbered("k", i).
std::string numbered(const char* prefix, int i) { return std::string(prefix).append(std::to_string(i)); }

// Runs body(i) on n threads; rethrows the first exception.
template <class F>
void on_threads(int n, F body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[size_t(i)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// A listening socket on 127.0.0.1 at a port the kernel picks (a stand-in "server"); -1 on failure.
int listen_loopback(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 4) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

// Reads (and drops) what the server sends until it closes the connection; false if it is still open
// after `within`.
bool closed_by_server(int fd, std::chrono::milliseconds within) {
  const auto dl = fr::deadline_after(within);
  char buf[256];
  for (;;) {
    const fr::IoResult r = fr::recv_exact(fd, buf, 1, dl);
    if (r.status == fr::IoStatus::Closed) return true;
    if (!r.ok()) return false;
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ar::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- frame codec ----

TEST(StoreFrame, EveryMessageRoundTrips) {
  std::vector<fr::Message> ms(15);
  const std::string n32(32, 'n'), m32(32, '\0');
  ms[0] = {fr::Op::Set, "k", std::string("v\0w", 3), {}, "", 0};
  ms[1] = {fr::Op::Get, "key", "", {}, "", 1500};
  ms[2] = {fr::Op::Wait, "", "", {"a", "", "c"}, "", 7};
  ms[3] = {fr::Op::Hello, "", "", {}, "node-3", 3};
  ms[4].op = fr::Op::Beat;
  ms[5] = {fr::Op::Fail, "", "", {}, "CUDA out of memory", 0};
  ms[6].op = fr::Op::Bye;
  ms[7].op = fr::Op::Ok;
  ms[8] = {fr::Op::Value, "", "payload", {}, "", 0};
  ms[9] = {fr::Op::Missing, "", "", {"x", "y"}, "", 0};
  ms[10] = {fr::Op::Verdict, "", "", {}, "rank 1 (host b) lost", 0};
  ms[11] = {fr::Op::Refused, "", "", {}, "no", 0};
  ms[12] = {fr::Op::Auth, n32, m32, {}, "", kPlainClient};
  ms[13] = {fr::Op::Challenge, "", n32, {}, "", 0};
  ms[14] = {fr::Op::Proof, "", m32, {}, "", 0};
  for (const auto& m : ms) {
    const std::string frame = fr::encode(m);
    ASSERT_EQ(frame.substr(0, 4), le32(uint32_t(frame.size() - 4))) << fr::op_name(m.op);
    const fr::Decoded d = fr::decode(std::string_view(frame).substr(4));
    ASSERT_TRUE(d.ok()) << fr::op_name(m.op) << ": " << d.error;
    EXPECT_EQ(d.msg, m) << fr::op_name(m.op);
  }
}

TEST(StoreFrame, DecoderRejectsMalformedPayloads) {
  using fr::Op;
  const std::string big_key(fr::kMaxKey + 1, 'k');
  struct Row {
    const char* name;
    std::string payload;
    const char* reason;
  } rows[] = {
      {"empty", "", "empty frame"},
      {"unknown op", "\x09", "unknown op 0x09"},
      {"reply-range unknown op", "\xff", "unknown op 0xff"},
      {"SET without key length", op(Op::Set) + "\x01\x00", "SET: truncated key"},
      {"SET key longer than the payload", op(Op::Set) + le32(10) + "abc", "SET: truncated key (10 bytes announced, 3 left)"},
      {"SET without value", op(Op::Set) + str("k"), "SET: truncated value"},
      {"SET trailing byte", op(Op::Set) + str("k") + str("v") + "!", "SET: 1 trailing byte(s)"},
      {"SET key over 4 KiB", op(Op::Set) + str(big_key) + str("v"), "key of 4097 bytes exceeds the limit of 4096"},
      {"SET value length over 16 MiB", op(Op::Set) + str("k") + le32((16u << 20) + 1), "value of 16777217 bytes exceeds"},
      {"GET without timeout", op(Op::Get) + "\x01", "GET: truncated timeout"},
      {"WAIT count beyond the bytes", op(Op::Wait) + le32(5) + le32(1000), "WAIT: truncated key count (1000 announced)"},
      {"WAIT key count over the cap", op(Op::Wait) + le32(5) + le32(70000) + std::string(280000, '\0'),
       "WAIT: key count 70000 exceeds the limit of 65536"},
      {"WAIT second key truncated", op(Op::Wait) + le32(5) + le32(2) + str("a") + le32(3), "WAIT: truncated key"},
      {"HELLO host over 4 KiB", op(Op::Hello) + le32(0) + str(big_key), "HELLO frame of 4106 bytes exceeds its limit of 4105"},
      {"HELLO host length over 4 KiB", op(Op::Hello) + le32(0) + le32(4097) + "h", "host of 4097 bytes exceeds"},
      {"BEAT with a field", op(Op::Beat) + "x", "BEAT frame of 2 bytes exceeds its limit of 1"},
      {"BYE with a field", op(Op::Bye) + le32(0), "BYE frame of 5 bytes exceeds its limit of 1"},
      {"VERDICT truncated", op(Op::Verdict) + le32(4) + "ab", "VERDICT: truncated text"},
      {"FAIL text over 64 KiB", op(Op::Fail) + str(std::string(65537, 'x')), "FAIL frame of 65542 bytes exceeds"},
      {"AUTH short nonce", op(Op::Auth) + le32(1) + str("n") + str(std::string(32, 'm')), "AUTH: nonce of 1 bytes (must be 32)"},
      {"AUTH without mac", op(Op::Auth) + le32(1) + str(std::string(32, 'n')), "AUTH: truncated mac"},
      {"CHALLENGE long nonce", op(Op::Challenge) + le32(33) + std::string(33, 'n'), "CHALLENGE frame of 38 bytes exceeds its limit of 37"},
      {"PROOF short mac", op(Op::Proof) + str("m"), "PROOF: mac of 1 bytes (must be 32)"},
      {"payload over the largest frame", op(Op::Set) + std::string(fr::kMaxFrame, '\0'), "exceeds the limit of"},
  };
  for (const Row& r : rows) {
    const fr::Decoded d = fr::decode(r.payload);
    EXPECT_FALSE(d.ok()) << r.name;
    EXPECT_NE(d.error.find(r.reason), std::string::npos) << r.name << ": got '" << d.error << "'";
    EXPECT_EQ(d.msg, fr::Message{}) << r.name << ": a rejected payload leaves no half-read message";
  }
  EXPECT_EQ(fr::check_frame_length(fr::kMaxFrame), "");
  EXPECT_NE(fr::check_frame_length(fr::kMaxFrame + 1), "");
  EXPECT_EQ(fr::check_frame(uint8_t(Op::Set), fr::kMaxFrame), "");
  EXPECT_NE(fr::check_frame(uint8_t(Op::Get), fr::kMaxFrame), "");
  fr::Message too_long{fr::Op::Get, big_key, "", {}, "", 0};
  EXPECT_NE(fr::check_request(too_long).find("4097"), std::string::npos);
}

// ---- key-value store ----

TEST(Store, SetGetWaitAcrossClients) {
  StoreServer server(kLocal, 0, 1, 5s, kToken);
  constexpr int n = 4;
  on_threads(n, [&](int i) {
    StoreClient c(kLocal, server.port(), 5s, kToken);
    c.set(numbered("k", i), std::vector<char>(size_t(i + 1), char('a' + i)));
    std::vector<std::string> all;
    for (int j = 0; j < n; ++j) all.push_back(numbered("k", j));
    c.wait(all);
    for (int j = 0; j < n; ++j) EXPECT_EQ(c.get(all[size_t(j)]), std::vector<char>(size_t(j + 1), char('a' + j)));
  });
  StoreClient c(kLocal, server.port(), 5s, kToken);
  c.set("k0", {'z'});  // overwrite
  EXPECT_EQ(c.get("k0"), std::vector<char>{'z'});
  c.set("empty", {});
  EXPECT_TRUE(c.get("empty").empty());
}

TEST(Store, GetWaitsForALaterSet) {
  StoreServer server(kLocal, 0, 1, 5s, kToken);
  StoreClient reader(kLocal, server.port(), 5s, kToken), writer(kLocal, server.port(), 5s, kToken);
  const auto t0 = Clock::now();
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    writer.set("late", {'x', 'y'});
  });
  EXPECT_EQ(reader.get("late"), (std::vector<char>{'x', 'y'}));
  EXPECT_GE(ms_since(t0), 290);
  late.join();
}

TEST(Store, GetAndWaitTimeoutsNameTheKeysAndAreBounded) {
  StoreServer server(kLocal, 0, 1, 5s, kToken);
  StoreClient c(kLocal, server.port(), 500ms, kToken);
  auto t0 = Clock::now();
  EXPECT_EQ(error_of([&] { c.get("missing"); }), "rendezvous: key(s) 'missing' not set within 0.5 s");
  double ms = ms_since(t0);
  EXPECT_GE(ms, 490);
  EXPECT_LT(ms, 1000);
  c.set("here", {'1'});
  t0 = Clock::now();
  EXPECT_EQ(error_of([&] { c.wait({"a", "here", "b"}, 300ms); }), "rendezvous: key(s) 'a', 'b' not set within 0.3 s");
  ms = ms_since(t0);
  EXPECT_GE(ms, 290);
  EXPECT_LT(ms, 600);
  EXPECT_EQ(c.get("here"), std::vector<char>{'1'});  // the connection is still usable after a timeout
}

TEST(Store, ConnectToAClosedPortFailsWithinTheTimeout) {
  int port = 0;
  {
    StoreServer gone(kLocal, 0, 1, 1s, kToken);  // a port that was free a moment ago and is closed now
    port = gone.port();
  }
  const auto t0 = Clock::now();
  const std::string e = error_of([&] { StoreClient c(kLocal, port, 500ms, kToken); });
  const double ms = ms_since(t0);
  EXPECT_EQ(e, "cannot reach the rendezvous at 127.0.0.1:" + std::to_string(port) +
                   " within 0.5 s: Connection refused");
  EXPECT_GE(ms, 450);
  EXPECT_LT(ms, 1000);
  std::printf("[ timing ] connect to a closed port with a 0.5 s timeout failed after %.0f ms\n", ms);
}

TEST(Store, AnUnresolvableAddressFailsAtOnce) {
  // .invalid never resolves (RFC 6761); a resolver that cannot answer at all (EAI_AGAIN) is retried.
  addrinfo* res = nullptr;
  const int g = ::getaddrinfo("no-such-host.invalid", "80", nullptr, &res);
  if (res) ::freeaddrinfo(res);
  if (g == EAI_AGAIN) GTEST_SKIP() << "the resolver cannot answer here";
  const auto t0 = Clock::now();
  const std::string e = error_of([&] { StoreClient c("no-such-host.invalid", 29500, 30s, kToken); });
  const double ms = ms_since(t0);
  EXPECT_EQ(e.rfind("cannot resolve the rendezvous address 'no-such-host.invalid' (MASTER_ADDR): ", 0), 0u) << e;
  EXPECT_LT(ms, 5000) << "retried a name that does not exist";
}

TEST(Store, ConnectRetriesUntilTheServerStarts) {
  int port = 0;
  {
    StoreServer probe(kLocal, 0, 1, 1s, kToken);
    port = probe.port();
  }
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<StoreServer>(kLocal, port, 1, 5s, kToken);
  });
  StoreClient c(kLocal, port, 5s, kToken);  // rank 0 starting late is normal
  starter.join();
  c.set("a", {'1'});
  EXPECT_EQ(c.get("a"), std::vector<char>{'1'});
}

TEST(Store, AllInterfacesServeIpv4AndIpv6Clients) {
  StoreServer server("", 0, 1, 5s, kToken);
  StoreClient v4(kLocal, server.port(), 2s, kToken), by_name("localhost", server.port(), 2s, kToken);
  v4.set("a", {'4'});
  EXPECT_EQ(by_name.get("a"), std::vector<char>{'4'});
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  const bool has_v6 = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0;
  if (probe >= 0) ::close(probe);
  if (!has_v6) GTEST_SKIP() << "no IPv6 loopback here";
  StoreClient v6("::1", server.port(), 2s, kToken);
  EXPECT_EQ(v6.get("a"), std::vector<char>{'4'});
  EXPECT_NE(error_of([] { StoreClient c("::1", 1, 200ms, kToken); }).find("rendezvous at [::1]:1 within 0.2 s"),
            std::string::npos);
}

TEST(Store, BindingAPortInUseIsAClearError) {
  StoreServer first(kLocal, 0, 1, 1s, kToken);
  const std::string port = std::to_string(first.port());
  try {
    StoreServer second(kLocal, first.port(), 1, 1s, kToken);
    FAIL() << "a second server bound the same port";
  } catch (const ar::Error& e) {
    EXPECT_EQ(e.kind(), ar::ErrorKind::Io);
    EXPECT_EQ(std::string(e.what()), "MASTER_PORT " + port + " on 127.0.0.1: address in use (another job or a "
                                                             "previous run still holds it)");
  }
  EXPECT_NE(error_of([] { StoreServer s(kLocal, 70000, 1, 1s, kToken); }).find("not a TCP port"), std::string::npos);
}

TEST(Store, AMalformedFrameClosesOnlyThatConnection) {
  StoreServer server(kLocal, 0, 2, 5s, kToken);
  StoreClient good(kLocal, server.port(), 5s, kToken);
  for (const std::string& junk : {le32(0xffffffffu) + "x", le32(1) + "\x42", le32(1) + op(fr::Op::Ok)}) {
    const int fd = fr::connect_with_retries(kLocal, server.port(), 2s);
    ASSERT_TRUE(fr::send_all(fd, junk, fr::deadline_after(2s)).ok());
    EXPECT_TRUE(closed_by_server(fd, 2s));
    ::close(fd);
  }
  good.set("still", {'1'});
  EXPECT_EQ(good.get("still"), std::vector<char>{'1'});
  EXPECT_EQ(server.verdict(), "");  // a foreign client is not a rank
}

// ---- Gloo through the store ----

TEST(Store, GlooRendezvousAndAllgather) {
  constexpr int size = 3;
  StoreServer server(kLocal, 0, size, 10s, kToken);
  std::vector<std::vector<int>> outs(size);
  on_threads(size, [&](int rank) {
    StoreClient client(kLocal, server.port(), 10s, kToken);
    gloo::rendezvous::PrefixStore store("test-allgather", client);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    gloo::transport::tcp::attr attr;
    attr.hostname = kLocal;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    ctx->connectFullMesh(store, dev);
    std::vector<int> in = {rank * 10, rank * 10 + 1};
    outs[size_t(rank)].assign(2 * size, -1);
    gloo::AllgatherOptions opts(ctx);
    opts.setInput(in.data(), in.size());
    opts.setOutput(outs[size_t(rank)].data(), outs[size_t(rank)].size());
    gloo::allgather(opts);
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(outs[size_t(r)], (std::vector<int>{0, 1, 10, 11, 20, 21})) << "rank " << r;
}

// ---- liveness ----

// Collects one rank's verdict callback (and checks it comes at most once).
struct Sink {
  std::mutex m;
  std::condition_variable cv;
  std::string verdict;
  int calls = 0;
  Clock::time_point at;
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& v) {
      std::lock_guard lk(m);
      verdict = v;
      ++calls;
      at = Clock::now();
      cv.notify_all();
    };
  }
  std::string wait(std::chrono::milliseconds within) {
    std::unique_lock lk(m);
    cv.wait_for(lk, within, [&] { return calls > 0; });
    return verdict;
  }
  int count() {
    std::lock_guard lk(m);
    return calls;
  }
};

TEST(Liveness, AllSayByeAndNoVerdict) {
  StoreServer server(kLocal, 0, 3, 2s, kToken);
  Sink sinks[3];
  std::vector<std::unique_ptr<Liveness>> ls;
  for (int r = 0; r < 3; ++r)
    ls.push_back(std::make_unique<Liveness>(kLocal, server.port(), r, numbered("h", r), 50ms, 2s, sinks[r].fn(), kToken));
  std::this_thread::sleep_for(300ms);  // several beats
  EXPECT_FALSE(server.wait_all_bye(10ms));
  for (auto& l : ls) l->finish();
  EXPECT_TRUE(server.wait_all_bye(2s));
  EXPECT_EQ(server.verdict(), "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sinks[r].count(), 0);
    EXPECT_EQ(ls[size_t(r)]->verdict(), "");
  }
  ls.clear();  // destructors after finish(): no second BYE, no verdict
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(server.verdict(), "");
}

// Helper for Liveness.AKilledRankIsReported: runs only in the child process that test spawns. It links
// as a rank, signals readiness on a pipe and waits to be SIGKILLed.
TEST(LivenessChild, LinkThenWaitForSigkill) {
  const char* port = std::getenv("AR_STORE_TEST_PORT");
  const char* ready = std::getenv("AR_STORE_TEST_READY_FD");
  if (!port || !ready) GTEST_SKIP() << "helper process of Liveness.AKilledRankIsReported";
  Liveness link(kLocal, std::atoi(port), 2, "child-host", 100ms, 10s, [](const std::string&) {}, kToken);
  const char b = 'R';
  (void)!::write(std::atoi(ready), &b, 1);
  for (;;) ::pause();
}

TEST(Liveness, AKilledRankIsReported) {
  constexpr Millis interval = 100ms, timeout = 3s;
  StoreServer server(kLocal, 0, 3, timeout, kToken);
  Sink s0, s1;
  Liveness l0(kLocal, server.port(), 0, "host-a", interval, timeout, s0.fn(), kToken);
  Liveness l1(kLocal, server.port(), 1, "host-b", interval, timeout, s1.fn(), kToken);

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // Everything the child needs is built before fork(): between fork and exec only exec runs.
  std::vector<std::string> env_s = {"AR_STORE_TEST_PORT=" + std::to_string(server.port()),
                                    "AR_STORE_TEST_READY_FD=" + std::to_string(ready[1])};
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp, argv;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=LivenessChild.LinkThenWaitForSigkill";
  argv = {exe.data(), filter.data(), nullptr};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  pollfd p{ready[0], POLLIN, 0};
  char b = 0;
  const bool linked = ::poll(&p, 1, 20000) == 1 && ::read(ready[0], &b, 1) == 1;
  ::close(ready[0]);
  if (!linked) ::kill(pid, SIGKILL);
  ASSERT_TRUE(linked) << "the child rank never linked";

  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(server.verdict(), "");
  const auto t0 = Clock::now();
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string want = "rank 2 (host child-host) lost: connection closed without finishing";
  EXPECT_EQ(s0.wait(timeout + interval), want);
  EXPECT_EQ(s1.wait(timeout + interval), want);
  const double latency = std::max(std::chrono::duration<double, std::milli>(s0.at - t0).count(),
                                  std::chrono::duration<double, std::milli>(s1.at - t0).count());
  const double bound = std::chrono::duration<double, std::milli>(timeout + interval).count();
  EXPECT_LT(latency, bound);
  std::printf("[ timing ] verdict at both ranks %.0f ms after SIGKILL (interval %d ms)\n", latency,
              int(interval.count()));
  EXPECT_EQ(server.verdict(), want);
  EXPECT_EQ(l0.verdict(), want);
  std::this_thread::sleep_for(3 * interval);
  EXPECT_EQ(s0.count(), 1);  // once
  EXPECT_FALSE(server.wait_all_bye(10ms));
}

TEST(Liveness, AFailureReachesTheOthers) {
  StoreServer server(kLocal, 0, 3, 5s, kToken);
  Sink sinks[3];
  Liveness l0(kLocal, server.port(), 0, "a", 50ms, 5s, sinks[0].fn(), kToken);
  Liveness l1(kLocal, server.port(), 1, "b", 50ms, 5s, sinks[1].fn(), kToken);
  Liveness l2(kLocal, server.port(), 2, "c", 50ms, 5s, sinks[2].fn(), kToken);
  l1.report_failure("CUDA error: out of memory in block 3");
  const std::string want = "rank 1 (host b) failed: CUDA error: out of memory in block 3";
  EXPECT_EQ(l1.verdict(), want);
  EXPECT_EQ(sinks[0].wait(2s), want);
  EXPECT_EQ(sinks[2].wait(2s), want);
  EXPECT_EQ(server.verdict(), want);
  EXPECT_FALSE(server.wait_all_bye(10ms));  // a verdict ends the wait
  l2.report_failure("a second failure");    // the first verdict stays
  EXPECT_EQ(l2.verdict(), want);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(sinks[1].count(), 0);  // the failing rank knows its own failure
  EXPECT_EQ(server.verdict(), want);
}

TEST(Liveness, ASilentRankIsLostAfterTheTimeout) {
  StoreServer server(kLocal, 0, 2, 500ms, kToken);
  Sink s0;
  Liveness l0(kLocal, server.port(), 0, "a", 50ms, 5s, s0.fn(), kToken);
  // Rank 1 says HELLO and then nothing, keeping its connection open (a hung process).
  const int fd = fr::connect_with_retries(kLocal, server.port(), 2s);
  auth::client(fd, kToken, 1, "rank 1", fr::deadline_after(2s));
  fr::Message hello{fr::Op::Hello, "", "", {}, "quiet-host", 1}, reply;
  ASSERT_TRUE(fr::exchange(fd, hello, reply, fr::deadline_after(2s)).ok());
  ASSERT_EQ(reply.op, fr::Op::Ok);
  const auto t0 = Clock::now();
  EXPECT_EQ(s0.wait(3s), "rank 1 (host quiet-host) lost: no heartbeat for 0.5 s");
  EXPECT_LT(ms_since(t0), 1500);
  ::close(fd);
}

TEST(Liveness, HelloIsRefusedForABadOrDuplicateRank) {
  StoreServer server(kLocal, 0, 2, 5s, kToken);
  Liveness l0(kLocal, server.port(), 0, "a", 50ms, 5s, [](const std::string&) {}, kToken);
  const std::string dup = error_of([&] { Liveness l(kLocal, server.port(), 0, "b", 50ms, 1s, {}, kToken); });
  EXPECT_NE(dup.find("rank 0 already said HELLO from host a"), std::string::npos) << dup;
  const std::string range = error_of([&] { Liveness l(kLocal, server.port(), 5, "b", 50ms, 1s, {}, kToken); });
  EXPECT_NE(range.find("rank 5 is out of range for a world of 2"), std::string::npos) << range;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(server.verdict(), "");  // a refused HELLO registers nothing
}

TEST(Liveness, RankZeroGoneIsAVerdictAndFinishDoesNotHang) {
  auto server = std::make_unique<StoreServer>(kLocal, 0, 3, 5s, kToken);
  Sink s1, s2;
  Liveness l1(kLocal, server->port(), 1, "b", 50ms, 5s, s1.fn(), kToken);
  Liveness l2(kLocal, server->port(), 2, "c", 50ms, 5s, s2.fn(), kToken);
  server.reset();
  const std::string want = "rank 0 (host 127.0.0.1) lost: rendezvous connection closed";
  EXPECT_EQ(s1.wait(2s), want);
  EXPECT_EQ(s2.wait(2s), want);
  const auto t0 = Clock::now();
  l1.finish();
  l2.finish();
  EXPECT_LT(ms_since(t0), 500);
}

TEST(Liveness, FinishDoesNotWaitOutAHungServer) {
  // A "server" that accepts and never answers (rank 0 stopped, or a network gone quiet).
  int port = 0;
  const int lfd = listen_loopback(port);
  ASSERT_GE(lfd, 0);
  std::thread answer_hello([&] {  // answers the authentication and the HELLO only
    const int c = ::accept(lfd, nullptr, nullptr);
    EXPECT_TRUE(auth::server(c, kToken, fr::deadline_after(5s), -1).ok);
    fr::Message req;
    if (fr::recv_message(c, req, fr::deadline_after(5s)).ok())
      (void)fr::send_all(c, fr::encode(fr::Message{}), fr::deadline_after(5s));
    std::this_thread::sleep_for(1500ms);
    ::close(c);
  });
  Sink s;
  {
    Liveness l(kLocal, port, 1, "b", 50ms, 700ms, s.fn(), kToken);
    EXPECT_EQ(s.wait(2s), "rank 0 (host 127.0.0.1) lost: the rendezvous did not answer for 0.7 s");
    const auto t0 = Clock::now();
    l.finish();
    EXPECT_LT(ms_since(t0), 300);
  }
  answer_hello.join();
  ::close(lfd);
}


// ---- strangers on the port (issue 23): nothing unauthenticated reaches the job ----

// Raw bytes from a connection that never authenticates: the server sends its challenge, reads one
// frame's head, and closes. The job's state (verdict, ranks, keys) never sees them.
TEST(StoreAuth, UnauthenticatedFramesNeverReachTheJob) {
  StoreServer server(kLocal, 0, 2, 5s, kToken);
  Sink s0;
  Liveness l0(kLocal, server.port(), 0, "a", 50ms, 5s, s0.fn(), kToken);
  StoreClient good(kLocal, server.port(), 5s, kToken);
  good.set("gloo/0", {'a', 'd', 'd', 'r'});
  const fr::Message fail_frame{fr::Op::Fail, "", "", {}, "stop the job", 0};
  const fr::Message forged_hello{fr::Op::Hello, "", "", {}, "stranger", 1};
  const fr::Message get_addr{fr::Op::Get, "gloo/0", "", {}, "", 1000};
  for (const fr::Message& m : {fail_frame, forged_hello, get_addr}) {
    const int fd = fr::connect_with_retries(kLocal, server.port(), 2s);
    ASSERT_TRUE(fr::send_all(fd, fr::encode(m), fr::deadline_after(2s)).ok());
    fr::Message challenge, next;
    ASSERT_TRUE(fr::recv_message(fd, challenge, fr::deadline_after(2s)).ok()) << fr::op_name(m.op);
    EXPECT_EQ(challenge.op, fr::Op::Challenge);
    EXPECT_EQ(fr::recv_message(fd, next, fr::deadline_after(2s)).status, fr::IoStatus::Closed) << fr::op_name(m.op);
    ::close(fd);
  }
  // The real rank 1 still joins (the forged HELLO took nothing), and nobody failed.
  Sink s1;
  Liveness l1(kLocal, server.port(), 1, "b", 50ms, 5s, s1.fn(), kToken);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(server.verdict(), "");
  EXPECT_EQ(s0.count(), 0);
  l1.finish();
  l0.finish();
  EXPECT_TRUE(server.wait_all_bye(2s));
}

// A rank with another token is refused naming the token; the server proves itself to clients too, so
// a foreign server cannot pose as rank 0.
TEST(StoreAuth, ADifferentTokenIsRefusedBothWays) {
  StoreServer server(kLocal, 0, 2, 5s, kToken);
  const std::string other = "another-job-token-0123456789";
  const std::string client_err = error_of([&] { StoreClient c(kLocal, server.port(), 2s, other); });
  EXPECT_NE(client_err.find("refused this rank's job token"), std::string::npos) << client_err;
  const std::string live_err = error_of([&] { Liveness l(kLocal, server.port(), 1, "b", 50ms, 2s, {}, other); });
  EXPECT_NE(live_err.find("(rank 1) refused this rank's job token"), std::string::npos) << live_err;
  EXPECT_EQ(server.verdict(), "");
  // A "server" that answers the challenge-response with a made-up proof.
  int port = 0;
  const int lfd = listen_loopback(port);
  ASSERT_GE(lfd, 0);
  std::thread impostor([&] {
    const int c = ::accept(lfd, nullptr, nullptr);
    fr::Message challenge{fr::Op::Challenge, "", auth::nonce(), {}, "", 0}, req;
    (void)fr::send_all(c, fr::encode(challenge), fr::deadline_after(2s));
    (void)fr::recv_message(c, req, fr::deadline_after(2s));
    (void)fr::send_all(c, fr::encode({fr::Op::Proof, "", auth::nonce(), {}, "", 0}), fr::deadline_after(2s));
    std::this_thread::sleep_for(200ms);
    ::close(c);
  });
  const std::string impostor_err = error_of([&] { StoreClient c(kLocal, port, 2s, kToken); });
  impostor.join();
  ::close(lfd);
  EXPECT_NE(impostor_err.find("did not prove that it holds this job's token"), std::string::npos) << impostor_err;
}

// Each connection's thread ends (and frees its per-thread OpenSSL state) soon after its peer closes,
// whether the peer authenticated or not.
TEST(StoreAuth, ConnectionThreadsEndWithTheirPeers) {
  StoreServer server(kLocal, 0, 2, 5s, kToken);
  auto settle = [&] {
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (server.serving_connections() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    return server.serving_connections();
  };
  {
    StoreClient a(kLocal, server.port(), 2s, kToken), b(kLocal, server.port(), 2s, kToken);
    a.set("k", {'v'});
    EXPECT_EQ(server.serving_connections(), 2u);
  }
  EXPECT_EQ(settle(), 0u);
  const int fd = fr::connect_with_retries(kLocal, server.port(), 2s);  // a stranger that says nothing
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(settle(), 0u);
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// Length prefixes announce 64 MiB (refused unread before authentication) and 16 MiB (an authenticated
// SET's limit, read as it arrives): six of each cost rank 0 what was sent, not what was announced, and
// a half frame is dropped after the frame deadline (the server's timeout, 1 s here).
TEST(StoreAuth, LargeLengthPrefixesAndHalfFramesAreBounded) {
  StoreServer server(kLocal, 0, 2, 1s, kToken);
  const long before = rss_kib();
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) {  // strangers
    const int fd = fr::connect_with_retries(kLocal, server.port(), 2s);
    ASSERT_TRUE(fr::send_all(fd, le32(64u << 20) + op(fr::Op::Set), fr::deadline_after(2s)).ok());
    EXPECT_TRUE(closed_by_server(fd, 2s)) << "stranger " << i;
    ::close(fd);
  }
  for (int i = 0; i < 6; ++i) {  // members that stall mid-frame
    const int fd = fr::connect_with_retries(kLocal, server.port(), 2s);
    auth::client(fd, kToken, kPlainClient, "member", fr::deadline_after(2s));
    const std::string head = le32(fr::kMaxFrame) + op(fr::Op::Set) + str("k") + le32(fr::kMaxValue) + "v";
    ASSERT_TRUE(fr::send_all(fd, head, fr::deadline_after(2s)).ok());
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(300ms);
  const long during = rss_kib();
  // About 6 MiB here (a 1 MiB chunk each), 33 MiB under TSan's shadow memory; reading the announced
  // lengths at once would be 96 MiB and more.
  EXPECT_LT(during - before, 48 * 1024) << "KiB grown while 6 x 16 MiB frames are announced";
  const auto t0 = Clock::now();
  for (int fd : fds) {
    EXPECT_TRUE(closed_by_server(fd, 3s)) << "a half frame outlived its deadline";
    ::close(fd);
  }
  EXPECT_LT(ms_since(t0), 2500);
  StoreClient good(kLocal, server.port(), 2s, kToken);
  good.set("still", {'1'});
  EXPECT_EQ(good.get("still"), std::vector<char>{'1'});
  EXPECT_EQ(server.verdict(), "");
}

// Connections awaiting authentication are bounded per address and in all, and each gets auth_deadline
// to finish; a newcomer past a bound displaces the oldest waiting connection (of its address; in all,
// of the address with the most waiting), never a member's, which is served alongside.
TEST(StoreAuth, PendingConnectionsAreBoundedByDisplacingTheOldest) {
  StoreLimits lim;
  lim.pending = 6;
  lim.pending_per_peer = 4;
  lim.auth_deadline = 3s;  // far from "at once", even on a loaded machine
  StoreServer server(kLocal, 0, 1, 8s, kToken, lim);
  StoreClient member(kLocal, server.port(), 2s, kToken);
  // One at a time, each counted by the accept thread before the next: the order is the age.
  auto open = [&](const char* source) {
    const int fd = ar::test::connect_from(source, server.port());
    std::this_thread::sleep_for(150ms);
    return fd;
  };
  std::vector<int> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(open("127.0.0.1"));
  auto t0 = Clock::now();
  silent.push_back(open("127.0.0.1"));
  EXPECT_TRUE(closed_by_server(silent[0], 3s)) << "the oldest of 5 waiting from one address";
  EXPECT_LT(ms_since(t0), 1500) << "displaced at once, not after the deadline";
  ::close(silent[0]);
  silent.erase(silent.begin());
  // In all: 4 from 127.0.0.1 and 2 from 127.0.0.2 wait; a newcomer from 127.0.0.3 displaces the oldest
  // of the address with the most (127.0.0.1).
  silent.push_back(open("127.0.0.2"));
  silent.push_back(open("127.0.0.2"));
  t0 = Clock::now();
  silent.push_back(open("127.0.0.3"));
  EXPECT_TRUE(closed_by_server(silent[0], 3s)) << "the oldest of the address with the most waiting";
  EXPECT_LT(ms_since(t0), 1500);
  ::close(silent[0]);
  silent.erase(silent.begin());
  for (int fd : silent) {
    EXPECT_TRUE(closed_by_server(fd, 6s)) << "a silent connection outlived the authentication deadline";
    ::close(fd);
  }
  member.set("k", {'v'});
  EXPECT_EQ(member.get("k"), std::vector<char>{'v'});
}

// A slowloris holding every waiting slot (8 from the ranks' own address, 8 from each of 7 more: the 64
// in all), reopening each connection the store closes: ranks' store clients and liveness links still
// authenticate, one after another, within the timeout. Before displacement, the ranks' connections
// were closed at accept and each failed at once.
TEST(StoreAuth, ASlowlorisCannotKeepRanksOut) {
  const int world = 6;
  StoreServer server("", 0, world, 20s, kToken);
  ar::test::Slowloris strangers(server.port(), ar::test::loopback_sources(7), 8);
  for (int i = 0; i < 400 && strangers.held() < 64; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(strangers.held(), 64) << "the strangers fill every waiting slot";
  std::vector<std::unique_ptr<Liveness>> links;
  const auto t0 = Clock::now();
  for (int r = 0; r < world; ++r) {
    StoreClient c(kLocal, server.port(), 20s, kToken, r);
    c.set(numbered("k", r), {'v'});
    links.push_back(std::make_unique<Liveness>(kLocal, server.port(), r, "host", 100ms, 20s,
                                               [](const std::string&) {}, kToken));
  }
  std::printf("%d ranks connected through a slowloris of 64 connections in %.0f ms (%d stranger connections)\n",
              world, ms_since(t0), strangers.opened());
  EXPECT_GT(strangers.opened(), 64) << "the store displaced strangers for the ranks";
  EXPECT_LT(ms_since(t0), 5000) << "the ranks waited out the strangers' 10 s deadline instead of displacing them";
  for (auto& l : links) l->finish();
  EXPECT_TRUE(server.wait_all_bye(5s));
  EXPECT_EQ(server.verdict(), "");
}

// An unauthenticated job's store listens on MASTER_ADDR's address only: the other loopback is closed.
TEST(StoreAuth, AStoreBoundToOneAddressServesNoOther) {
  StoreServer server(kLocal, 0, 1, 5s, "");
  StoreClient v4(kLocal, server.port(), 2s, "");
  v4.set("k", {'v'});
  EXPECT_NE(error_of([&] { StoreClient c("::1", server.port(), 300ms, ""); }).find("cannot reach the rendezvous"),
            std::string::npos);
}

// The store's bytes are bounded (a SET past the limit is refused, naming it), and release_keys frees
// everything (the job calls it once every rank has read the rendezvous).
TEST(StoreAuth, StoredBytesAreBoundedAndReleased) {
  StoreLimits lim;
  lim.store_bytes = 1000;
  StoreServer server(kLocal, 0, 1, 5s, kToken, lim);
  StoreClient c(kLocal, server.port(), 300ms, kToken);
  c.set("a", std::vector<char>(600, 'x'));
  const std::string full = error_of([&] { c.set("b", std::vector<char>(600, 'y')); });
  EXPECT_NE(full.find("the store is full"), std::string::npos) << full;
  StoreClient c2(kLocal, server.port(), 300ms, kToken);  // a refused SET leaves the connection usable
  c2.set("a", std::vector<char>(900, 'z'));              // replacing a value frees the old one
  EXPECT_EQ(server.stored_bytes(), 901u);
  server.release_keys();
  EXPECT_EQ(server.stored_bytes(), 0u);
  const std::string gone = error_of([&] { (void)c2.get("a"); });
  EXPECT_NE(gone.find("'a' not set"), std::string::npos) << gone;
}

}  // namespace
