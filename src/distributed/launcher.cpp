#include "distributed/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/error.h"
#include "core/log.h"

namespace ar::dist {

namespace {

using Clock = std::chrono::steady_clock;

// The signals the launcher handles while it runs: the three it forwards, and SIGCHLD to wake up when a
// rank ends.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
constexpr int kNumSignals = 4;

// Write end of the launcher's self-pipe. Signal handlers are process-wide and may run on any thread, so
// the handler's only state is this descriptor (as in core/interrupt.cpp); -1 when no launcher runs.
std::atomic<int> g_wake_fd{-1};

void on_signal(int sig) {
  const int fd = g_wake_fd.load(std::memory_order_relaxed);
  const unsigned char b = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!::write(fd, &b, 1);  // non-blocking: a full pipe already holds a wake-up
}

std::string signal_name(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},   {SIGTRAP, "SIGTRAP"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
      {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
      {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [n, name] : kNames)
    if (n == sig) return name;
  return "signal " + std::to_string(sig);
}

// Installs the launcher's handlers (writing into a self-pipe) and puts the previous ones back on exit,
// so a CLI's interrupt cleanup (core/interrupt.h) resumes once the launcher returns.
class SignalScope {
 public:
  SignalScope() {
    if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) fail(ErrorKind::Io, std::string("launch: pipe: ") + strerror(errno));
    int expected = -1;
    if (!g_wake_fd.compare_exchange_strong(expected, fds_[1])) {
      close(fds_[0]);
      close(fds_[1]);
      fail(ErrorKind::Internal, "launch: a launcher is already running in this process");
    }
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (int i = 0; i < kNumSignals; ++i) {
      sigaction(kSignals[i], nullptr, &old_[i]);
      // A signal ignored at start stays ignored (`nohup autoround launch`): neither handled nor forwarded.
      if (kSignals[i] != SIGCHLD && was_ignored(i)) continue;
      sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~SignalScope() {
    for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_fd.store(-1);
    close(fds_[0]);
    close(fds_[1]);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  int read_fd() const { return fds_[0]; }
  // What a child's signal i should be at exec: ignored stays ignored (nohup), anything else default.
  bool was_ignored(int i) const { return old_[i].sa_handler == SIG_IGN; }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction old_[kNumSignals] = {};
};

// One rank's exec arguments, built before fork: between fork and exec only async-signal-safe calls are
// allowed (another thread may hold the allocator's lock at the fork). argv/envp point into the string
// vectors' buffers, which keep their place when a Spawn is moved.
struct Spawn {
  int local_rank = 0, global_rank = 0;
  std::vector<std::string> argv_s, env_s;
  std::vector<char*> argv, envp;
  std::string exec_error;  // written to stderr if execve fails
};

bool sets_variable(const std::string& entry, const std::vector<std::string>& ours) {
  for (const auto& o : ours)
    if (entry.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0) return true;
  return false;
}

Spawn build_spawn(const LaunchOptions& opt, int local_rank) {
  Spawn s;
  s.local_rank = local_rank;
  s.global_rank = opt.node_rank * opt.nproc_per_node + local_rank;
  std::vector<std::string> ours = {
      "RANK=" + std::to_string(s.global_rank), "WORLD_SIZE=" + std::to_string(opt.nnodes * opt.nproc_per_node),
      "LOCAL_RANK=" + std::to_string(local_rank), "LOCAL_WORLD_SIZE=" + std::to_string(opt.nproc_per_node),
      "GROUP_RANK=" + std::to_string(opt.node_rank), "MASTER_ADDR=" + opt.master_addr,
      "MASTER_PORT=" + std::to_string(opt.master_port)};
  if (!opt.advertise_addr.empty()) ours.push_back("AR_ADVERTISE_ADDR=" + opt.advertise_addr);
  if (!opt.job_token.empty()) ours.push_back("AR_JOB_TOKEN=" + opt.job_token);
  for (char** e = environ; *e; ++e)
    if (!sets_variable(*e, ours)) s.env_s.emplace_back(*e);
  s.env_s.insert(s.env_s.end(), ours.begin(), ours.end());
  s.argv_s.push_back(opt.self_exe);
  s.argv_s.insert(s.argv_s.end(), opt.args.begin(), opt.args.end());
  for (auto& a : s.argv_s) s.argv.push_back(a.data());
  for (auto& e : s.env_s) s.envp.push_back(e.data());
  s.argv.push_back(nullptr);
  s.envp.push_back(nullptr);
  s.exec_error = "launch: local rank " + std::to_string(local_rank) + ": cannot execute " + opt.self_exe + "\n";
  return s;
}

// The child side of fork: async-signal-safe calls only, then exec.
[[noreturn]] void exec_child(const Spawn& s, const SignalScope& sigs, const sigset_t& caller_mask, pid_t parent) {
  // Die with the launcher even if it is SIGKILLed; if it is already gone, the death signal came too late.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);
  // Signals are blocked here (see start_ranks), so resetting the launcher's handlers before unblocking
  // cannot let a signal reach them and write into the launcher's pipe.
  struct sigaction sa = {};
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNumSignals; ++i) {
    sa.sa_handler = sigs.was_ignored(i) ? SIG_IGN : SIG_DFL;
    sigaction(kSignals[i], &sa, nullptr);
  }
  sigprocmask(SIG_SETMASK, &caller_mask, nullptr);
  execve(s.argv[0], s.argv.data(), s.envp.data());
  (void)!write(STDERR_FILENO, s.exec_error.data(), s.exec_error.size());
  _exit(127);
}

struct Child {
  pid_t pid;
  int local_rank, global_rank;
  bool alive = true;
};

// Forks every rank with the handled signals blocked in this thread, so that no child runs the launcher's
// handler before its exec. A failed fork kills the ranks already started.
std::vector<Child> start_ranks(const std::vector<Spawn>& spawns, const SignalScope& sigs) {
  sigset_t block, caller_mask;
  sigemptyset(&block);
  for (int sig : kSignals) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &caller_mask);
  const pid_t self = getpid();
  std::vector<Child> children;
  for (const Spawn& s : spawns) {
    const pid_t pid = fork();
    if (pid == 0) exec_child(s, sigs, caller_mask, self);
    if (pid < 0) {
      const int err = errno;
      for (const Child& c : children) kill(c.pid, SIGKILL);
      for (const Child& c : children) waitpid(c.pid, nullptr, 0);
      pthread_sigmask(SIG_SETMASK, &caller_mask, nullptr);
      fail(ErrorKind::Io, "launch: fork for local rank " + std::to_string(s.local_rank) + " failed: " + strerror(err));
    }
    children.push_back({pid, s.local_rank, s.global_rank});
  }
  pthread_sigmask(SIG_SETMASK, &caller_mask, nullptr);
  return children;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + signal_name(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// Waits for the ranks; the first failure or forwarded signal stops the rest (SIGTERM or the signal,
// SIGKILL after the grace period) and decides the exit code.
class Supervisor {
 public:
  Supervisor(std::vector<Child> children, double grace_s, int wake_fd)
      : children_(std::move(children)),
        grace_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s))),
        wake_fd_(wake_fd) {}

  int run() {
    while (alive() > 0) {
      wait_for_wakeup();
      reap();
      if (deadline_ && !killed_ && Clock::now() >= *deadline_) {
        char grace[32];
        std::snprintf(grace, sizeof grace, "%g", std::chrono::duration<double>(grace_).count());
        log_warn("launch: " + std::to_string(alive()) + " rank(s) still running after the " + grace +
                 " s grace period; sending SIGKILL");
        kill_all(SIGKILL);
      }
    }
    return code_ < 0 ? 0 : code_;
  }

 private:
  int alive() const {
    int n = 0;
    for (const Child& c : children_) n += c.alive;
    return n;
  }
  void signal_all(int sig) {
    for (const Child& c : children_)
      if (c.alive) kill(c.pid, sig);
  }
  void kill_all(int sig) {
    signal_all(sig);
    killed_ = true;
  }
  void begin_stop(int sig) {
    signal_all(sig);
    deadline_ = Clock::now() + grace_;
  }

  // Sleeps until a signal arrives (SIGCHLD included) or the grace period ends; the 1 s cap is only a
  // safety net, every rank's exit writes into the pipe.
  void wait_for_wakeup() {
    int timeout_ms = 1000;
    if (deadline_ && !killed_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now()).count();
      timeout_ms = int(std::clamp<long long>(left, 0, timeout_ms));
    }
    pollfd p = {wake_fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return;  // timeout, or EINTR: the caller re-checks everything
    unsigned char buf[64];
    ssize_t n;
    while ((n = read(wake_fd_, buf, sizeof buf)) > 0)
      for (ssize_t i = 0; i < n; ++i)
        if (buf[i] != SIGCHLD) on_forwarded_signal(buf[i]);
  }

  void on_forwarded_signal(int sig) {
    if (deadline_ && !killed_) {  // a second Ctrl-C while stopping: do not wait out the grace period
      log_warn("launch: received " + signal_name(sig) + " while stopping; sending SIGKILL");
      kill_all(SIGKILL);
      return;
    }
    if (deadline_) return;
    log_warn("launch: received " + signal_name(sig) + "; forwarding it to " + std::to_string(alive()) + " rank(s)");
    if (code_ < 0) code_ = 128 + sig;
    begin_stop(sig);
  }

  void reap() {
    for (Child& c : children_) {
      if (!c.alive) continue;
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      c.alive = false;
      if (r < 0) status = 1 << 8;  // reaped by someone else (ECHILD): its code is lost, count it a failure
      on_exit(c, status);
    }
  }

  void on_exit(const Child& c, int status) {
    const std::string who = "launch: local rank " + std::to_string(c.local_rank) + " (global rank " +
                            std::to_string(c.global_rank) + ") " + describe_exit(status);
    const bool failed = WIFSIGNALED(status) || WEXITSTATUS(status) != 0;
    if (!failed || deadline_) {  // a success, or a rank ending because it was told to stop
      log(deadline_ ? LogLevel::Info : LogLevel::Debug, who);
      return;
    }
    code_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    log_warn(alive() ? who + "; stopping the other " + std::to_string(alive()) + " rank(s)" : who);
    begin_stop(SIGTERM);
  }

  std::vector<Child> children_;
  Clock::duration grace_;
  int wake_fd_;
  std::optional<Clock::time_point> deadline_;  // set once stopping began
  bool killed_ = false;                        // SIGKILL sent
  int code_ = -1;                              // the launcher's exit code once decided
};

}  // namespace

void check_launch_options(const LaunchOptions& opt) {
  auto bad = [](const std::string& msg) { fail(ErrorKind::InvalidInput, msg); };
  if (opt.nnodes < 1) bad("--nnodes " + std::to_string(opt.nnodes) + " must be at least 1");
  if (opt.nproc_per_node < 1) bad("--nproc_per_node " + std::to_string(opt.nproc_per_node) + " must be at least 1");
  if (opt.node_rank < 0 || opt.node_rank >= opt.nnodes)
    bad("--node_rank " + std::to_string(opt.node_rank) + " must be in 0.." + std::to_string(opt.nnodes - 1) +
        " (--nnodes " + std::to_string(opt.nnodes) + ")");
  if (static_cast<long long>(opt.nnodes) * opt.nproc_per_node > INT_MAX)
    bad("--nnodes " + std::to_string(opt.nnodes) + " x --nproc_per_node " + std::to_string(opt.nproc_per_node) +
        " ranks is too many");
  if (opt.master_port < 1 || opt.master_port > 65535)
    bad("--master_port " + std::to_string(opt.master_port) + " is out of range (1..65535)");
  if (opt.master_addr.empty()) bad("--master_addr is empty");
  if (!std::isfinite(opt.grace_s) || opt.grace_s < 0 || opt.grace_s > 1e6) {
    char grace[32];
    std::snprintf(grace, sizeof grace, "%g", opt.grace_s);
    bad(std::string("--grace ") + grace + " must be a number of seconds in 0..1000000");
  }
  if (opt.args.empty()) bad("no command for the ranks: pass it after `--` (autoround launch ... -- --model DIR ...)");
}

int run_launcher(const LaunchOptions& opt) {
  check_launch_options(opt);
  AR_CHECK(!opt.self_exe.empty(), "launch: no executable for the ranks");
  if (access(opt.self_exe.c_str(), X_OK) != 0)
    fail(ErrorKind::Io, "launch: cannot execute '" + opt.self_exe + "': " + strerror(errno));
  std::vector<Spawn> spawns;
  spawns.reserve(size_t(opt.nproc_per_node));
  for (int i = 0; i < opt.nproc_per_node; ++i) spawns.push_back(build_spawn(opt, i));
  const int first = opt.node_rank * opt.nproc_per_node;
  log_info("launch: node " + std::to_string(opt.node_rank) + " of " + std::to_string(opt.nnodes) + " starts ranks " +
           std::to_string(first) + ".." + std::to_string(first + opt.nproc_per_node - 1) + " of " +
           std::to_string(opt.nnodes * opt.nproc_per_node) + ", rendezvous " + opt.master_addr + ":" +
           std::to_string(opt.master_port));
  SignalScope sigs;  // before the first fork, so a rank that ends at once still wakes the loop
  return Supervisor(start_ranks(spawns, sigs), opt.grace_s, sigs.read_fd()).run();
}

}  // namespace ar::dist
