// The engine's log lines and progress (core/log.h) handed to Python callables for the length of one
// engine call, and the call's cancellation: after cancel(), the next progress event (a block start or
// a tuning iteration) throws, the run unwinds and its temporary output is removed. Owned by Python.
#pragma once
#include <nanobind/nanobind.h>

#include <atomic>

#include "core/log.h"

namespace ar::py {

class LogBridge final : public LogObserver {
 public:
  // line(level: int, message: str); progress(block, blocks, iter, iters, loss, best). Either may be None.
  LogBridge(nanobind::object line, nanobind::object progress);
  LogBridge(const LogBridge&) = delete;
  LogBridge& operator=(const LogBridge&) = delete;

  void line(LogLevel level, const std::string& msg) override;
  void progress(const ProgressEvent& e) override;
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Installs this bridge as the process's log observer while alive; one engine call at a time.
  class Scope {
   public:
    explicit Scope(LogBridge& b);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

 private:
  nanobind::object line_, progress_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace ar::py
