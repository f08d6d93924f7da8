// The log sink (core/log.h) with a host program's observer, as the Python module installs one: lines
// and progress from many threads reach it whole and in each thread's order, log_result() reaches it
// at Info, and without an observer log_result() prints the bare line whatever the level. Run under
// TSan with the rest of the suite (AR_SANITIZE=thread).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"

namespace ar {
namespace {

class Recorder final : public LogObserver {
 public:
  void line(LogLevel level, const std::string& msg) override {
    std::lock_guard<std::mutex> lk(mu_);
    lines.emplace_back(level, msg);
  }
  void progress(const ProgressEvent& e) override {
    std::lock_guard<std::mutex> lk(mu_);
    events.push_back(e);
  }
  std::vector<std::pair<LogLevel, std::string>> lines;
  std::vector<ProgressEvent> events;

 private:
  std::mutex mu_;
};

// Installs an observer for one test and restores the defaults after it.
struct ObserverScope {
  explicit ObserverScope(LogObserver* o) { set_log_observer(o); }
  ~ObserverScope() {
    set_log_observer(nullptr);
    set_log_level(LogLevel::Info);
  }
};

TEST(Log, LinesAndProgressFromManyThreadsReachTheObserverInEachThreadsOrder) {
  Recorder rec;
  ObserverScope scope(&rec);
  EXPECT_TRUE(has_log_observer());
  constexpr int kThreads = 4, kLines = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) {
        log_info("thread " + std::to_string(t) + " line " + std::to_string(i));
        ProgressEvent e;
        e.block = t;
        e.iter = i;
        EXPECT_TRUE(report_progress(e));
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(rec.lines.size(), size_t(kThreads * kLines));
  ASSERT_EQ(rec.events.size(), size_t(kThreads * kLines));
  std::map<int, int> next_line, next_iter;
  for (const auto& [level, msg] : rec.lines) {
    EXPECT_EQ(level, LogLevel::Info);
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(msg.c_str(), "thread %d line %d", &t, &i), 2) << msg;
    EXPECT_EQ(i, next_line[t]++) << msg;
  }
  for (const auto& e : rec.events) EXPECT_EQ(e.iter, next_iter[int(e.block)]++);
}

TEST(Log, TheLevelFiltersLinesButNotResults) {
  Recorder rec;
  ObserverScope scope(&rec);
  set_log_level(LogLevel::Warn);
  log_info("hidden");
  log_warn("shown");
  log_result("quantized 2 blocks in 0.1 s: out");
  ASSERT_EQ(rec.lines.size(), 2u);
  EXPECT_EQ(rec.lines[0], std::make_pair(LogLevel::Warn, std::string("shown")));
  EXPECT_EQ(rec.lines[1], std::make_pair(LogLevel::Info, std::string("quantized 2 blocks in 0.1 s: out")));
}

TEST(Log, WithoutAnObserverResultsAreBareLinesOnStderrEvenWhenQuiet) {
  ObserverScope scope(nullptr);
  EXPECT_FALSE(has_log_observer());
  EXPECT_FALSE(report_progress(ProgressEvent{}));
  set_log_level(LogLevel::Quiet);
  testing::internal::CaptureStderr();
  log_warn("not shown");
  log_result("wrote out\nx");  // a newline in a message cannot start a line of its own
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "wrote out\\x0ax\n");
}

}  // namespace
}  // namespace ar
