// Runs `run` in a forked child and SIGKILLs it once the resume state at `state` says block 1 is
// checkpointed (polled every 10 ms, up to 10 minutes). Returns whether it was killed (false: the child
// ended first). For the --resume tests of the pipeline.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>
#include <string>

#include "io/mapped_file.h"

namespace ar::test {

inline bool kill_after_block_one(const std::function<void()>& run, const std::string& state) {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    try {
      run();
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  bool killed = false;
  for (int i = 0; i < 60000 && !killed; ++i) {
    if (file_exists(state) && read_text_file(state).find("\"next_block\":1") != std::string::npos) {
      kill(pid, SIGKILL);
      killed = true;
    }
    usleep(10000);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return killed && WIFSIGNALED(st);
}

}  // namespace ar::test
