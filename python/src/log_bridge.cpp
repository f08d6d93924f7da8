#include "log_bridge.h"

#include <nanobind/stl/string.h>

#include <stdexcept>

#include "core/error.h"

namespace nb = nanobind;

namespace ar::py {

namespace {
// The engine's log observer is process-wide (core/log.h), so one engine call runs at a time.
std::atomic<bool> g_busy{false};

// A Python callback that raised: reported as unraisable (the run goes on), as Python does for callbacks
// that have nowhere to raise.
void call_quietly(const nb::object& f, const auto&... args) {
  if (!f.is_valid() || f.is_none()) return;
  nb::gil_scoped_acquire gil;
  try {
    f(args...);
  } catch (nb::python_error& e) {
    e.discard_as_unraisable(f);
  }
}
}  // namespace

LogBridge::LogBridge(nb::object line, nb::object progress) : line_(std::move(line)), progress_(std::move(progress)) {}

void LogBridge::line(LogLevel level, const std::string& msg) { call_quietly(line_, int(level), msg); }

void LogBridge::progress(const ProgressEvent& e) {
  if (cancelled_) fail(ErrorKind::Internal, "interrupted (KeyboardInterrupt)");
  call_quietly(progress_, e.block, e.blocks, e.iter, e.iters, e.loss, e.best);
}

LogBridge::Scope::Scope(LogBridge& b) {
  if (g_busy.exchange(true))
    throw std::runtime_error("another autoround_cpp engine call is running in this process (one at a time)");
  set_log_observer(&b);
}

LogBridge::Scope::~Scope() {
  set_log_observer(nullptr);
  g_busy = false;
}

}  // namespace ar::py
