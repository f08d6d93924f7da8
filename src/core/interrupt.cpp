#include "core/interrupt.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "core/printable.h"

namespace ar {

namespace {
struct Entry {
  std::string path;
  bool keep;
};
struct Registry {
  std::recursive_mutex m;  // held by cleanup until the process exits, and by commits around their renames
  std::map<long, Entry> entries;
  long next = 0;
  bool installed = false;
};
Registry& registry() {
  static Registry r;  // process-wide by nature: signals are delivered to the process (see header)
  return r;
}

// Write end of the self-pipe: the async-signal-safe handler's only state (see header).
std::atomic<int> g_signal_pipe{-1};

void on_signal(int sig) {
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  const unsigned char b = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!::write(fd, &b, 1);
}

// Removes a path; a writer thread may still add a file between the walk and the final rmdir, so retry.
void remove_now(const std::string& path) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;
    usleep(10000);
  }
}

// Prints `header`, removes (or names, when kept) every registered temporary output and ends the process.
// `header` may quote a peer's words: it is printed through printable(), after a line break of our own when
// `new_line` (a progress line may be open when a signal arrives).
[[noreturn]] void clean_up_and_exit(const std::string& header, int code, bool new_line) {
  Registry& r = registry();
  r.m.lock();  // never unlocked: the process ends below, and no commit may start meanwhile
  std::fprintf(stderr, "%s%s\n", new_line ? "\n" : "", printable(header).c_str());
  for (const auto& [id, e] : r.entries) {
    if (e.keep) {
      std::fprintf(stderr, "resume state kept in %s (rerun the same command with --resume to continue)\n", e.path.c_str());
    } else {
      remove_now(e.path);
      std::fprintf(stderr, "removed temporary output %s\n", e.path.c_str());
    }
  }
  std::fflush(stderr);
  _exit(code);
}

[[noreturn]] void watch(int read_fd) {
  unsigned char b = 0;
  while (::read(read_fd, &b, 1) != 1) {
  }
  const int sig = b;
  clean_up_and_exit(std::string("interrupted by ") + strsignal(sig), 128 + sig, /*new_line=*/true);
}
}  // namespace

void exit_with_cleanup(const std::string& message, int code) { clean_up_and_exit(message, code, false); }

void install_interrupt_cleanup() {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> g(r.m);
  if (r.installed) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;  // no cleanup on signals, but the run itself is unaffected
  g_signal_pipe.store(fds[1]);
  std::thread(watch, fds[0]).detach();
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // A signal ignored when the process started stays ignored: `nohup autoround ... &` (SIGHUP) and a
  // shell's background job without job control (SIGINT) must survive what their caller shielded them from.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
  r.installed = true;
}

void TempRegistration::assign(const std::string& path, bool keep) {
  release();
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> g(r.m);
  id_ = r.next++;
  r.entries[id_] = {path, keep};
}

void TempRegistration::release() {
  if (id_ < 0) return;
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> g(r.m);
  r.entries.erase(id_);
  id_ = -1;
}

void without_interrupt_cleanup(const std::function<void()>& f) {
  std::lock_guard<std::recursive_mutex> g(registry().m);
  f();
}

}  // namespace ar
