#include "core/log.h"

#include "core/printable.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace ar {
namespace {
// The log sink's settings, the only globals: its level, and the tag of this process in a multi-process
// job ("rank 1"), set once by the CLI before the run starts logging.
std::atomic<int> g_level{int(LogLevel::Info)};
std::mutex g_mu;
std::string g_tag;  // guarded by g_mu
}  // namespace

void set_log_level(LogLevel l) { g_level = int(l); }

void set_log_tag(const std::string& tag) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_tag = tag;
}

void log(LogLevel l, const std::string& msg) {
  if (int(l) < g_level.load()) return;
  static const char* kTag[] = {"debug", "info", "warn", "error"};
  // One message is one line: a newline or control byte inside it (input bytes in a note) is escaped,
  // so it cannot start a line of its own, and a NUL no longer ends it.
  const std::string text = printable(msg);
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_tag.empty()) std::fprintf(stderr, "[%s] %s\n", kTag[int(l)], text.c_str());
  else std::fprintf(stderr, "[%s] [%s] %s\n", kTag[int(l)], g_tag.c_str(), text.c_str());
}
}  // namespace ar
