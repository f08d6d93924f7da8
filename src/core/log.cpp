#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace ar {
namespace {
std::atomic<int> g_level{int(LogLevel::Info)};  // the log sink's level: the only global
std::mutex g_mu;
}  // namespace

void set_log_level(LogLevel l) { g_level = int(l); }

void log(LogLevel l, const std::string& msg) {
  if (int(l) < g_level.load()) return;
  static const char* kTag[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lk(g_mu);
  std::fprintf(stderr, "[%s] %s\n", kTag[int(l)], msg.c_str());
}
}  // namespace ar
