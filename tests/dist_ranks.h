// Test helpers for multi-process jobs: ranks of the `autoround` CLI started with torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each logging to a file.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace ar::test {

struct RankSpec {
  std::vector<std::string> args;    // after the binary
  std::string binary;               // "" = AR_CLI_PATH
  std::vector<std::string> prefix;  // run under this command (e.g. ip netns exec ns0)
  std::string master_addr = "127.0.0.1";
  bool skip = false;  // not started (a rank that never shows up)
  std::vector<std::string> env;  // extra VAR=value entries (after the inherited ones)
};
struct RankRun {
  pid_t pid = -1;
  std::string log;
};
struct RankEnd {
  int code = -1;     // exit code, 128 + signal when killed
  double seconds = 0;  // from the wait's start
  std::string log;
};

int free_port();
// Starts rank r of `specs.size()` with specs[r]; the log goes to dir/rank<r>.log.
std::vector<RankRun> start_ranks(const std::vector<RankSpec>& specs, int port, const std::string& dir,
                                 const std::string& cli_path);
// Waits for every rank (SIGKILLs what is left after timeout_s, code -1 then).
std::vector<RankEnd> wait_ranks(std::vector<RankRun>& ranks, double timeout_s);
// Every regular file under dir (relative name -> bytes).
std::vector<std::pair<std::string, std::string>> dir_files(const std::string& dir);

}  // namespace ar::test
