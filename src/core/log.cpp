#include "core/log.h"

#include "core/printable.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace ar {
namespace {
// The log sink's settings, the only globals: its level, the tag of this process in a multi-process
// job ("rank 1"), set once by the CLI before the run starts logging, and a host program's observer.
std::atomic<int> g_level{int(LogLevel::Info)};
std::mutex g_mu;
std::string g_tag;  // guarded by g_mu
std::atomic<LogObserver*> g_observer{nullptr};
}  // namespace

void set_log_observer(LogObserver* o) { g_observer = o; }
bool has_log_observer() { return g_observer.load() != nullptr; }

bool report_progress(const ProgressEvent& e) {
  LogObserver* o = g_observer.load();
  if (!o) return false;
  o->progress(e);
  return true;
}

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
  if (LogObserver* o = g_observer.load()) return o->line(l, text);
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_tag.empty()) std::fprintf(stderr, "[%s] %s\n", kTag[int(l)], text.c_str());
  else std::fprintf(stderr, "[%s] [%s] %s\n", kTag[int(l)], g_tag.c_str(), text.c_str());
}

void log_result(const std::string& msg) {
  const std::string text = printable(msg);
  if (LogObserver* o = g_observer.load()) return o->line(LogLevel::Info, text);
  std::lock_guard<std::mutex> lk(g_mu);
  std::fprintf(stderr, "%s\n", text.c_str());
}
}  // namespace ar
