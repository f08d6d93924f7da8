#include "dist_ranks.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <filesystem>

#include "io/mapped_file.h"

extern char** environ;

namespace ar::test {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return 0;
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<RankRun> start_ranks(const std::vector<RankSpec>& specs, int port, const std::string& dir,
                                 const std::string& cli_path) {
  std::vector<RankRun> out;
  const int world = int(specs.size());
  for (int r = 0; r < world; ++r) {
    const RankSpec& s = specs[size_t(r)];
    if (s.skip) {
      out.push_back({});
      continue;
    }
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (key != "RANK" && key != "WORLD_SIZE" && key != "LOCAL_RANK" && key != "LOCAL_WORLD_SIZE" &&
          key != "MASTER_ADDR" && key != "MASTER_PORT" && key.rfind("SLURM_", 0) && key.rfind("OMPI_", 0) &&
          key.rfind("PMI_", 0))
        env.push_back(kv);
    }
    for (const auto& kv : world == 1 ? std::vector<std::string>{} : std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                           "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=" + std::to_string(world),
                           "MASTER_ADDR=" + s.master_addr, "MASTER_PORT=" + std::to_string(port)})
      env.push_back(kv);  // a single process gets none: a plain run
    env.insert(env.end(), s.env.begin(), s.env.end());
    std::vector<std::string> argv = s.prefix;
    argv.push_back(s.binary.empty() ? cli_path : s.binary);
    argv.insert(argv.end(), s.args.begin(), s.args.end());
    const std::string log = dir + "/rank" + std::to_string(r) + ".log";
    std::vector<char*> av, ev;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    for (auto& e : env) ev.push_back(e.data());
    ev.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
      execvpe(av[0], av.data(), ev.data());
      _exit(127);
    }
    out.push_back({pid, log});
  }
  return out;
}

std::vector<RankEnd> wait_ranks(std::vector<RankRun>& ranks, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<RankEnd> ends(ranks.size());
  size_t left = 0;
  for (const auto& r : ranks) left += r.pid >= 0;
  while (left > 0) {
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].pid < 0) continue;
      int st = 0;
      if (el > timeout_s) kill(ranks[i].pid, SIGKILL);
      if (waitpid(ranks[i].pid, &st, el > timeout_s ? 0 : WNOHANG) != ranks[i].pid) continue;
      ends[i].code = el > timeout_s ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      ends[i].seconds = el;
      ends[i].log = read_text_file(ranks[i].log);
      ranks[i].pid = -1;
      --left;
    }
    usleep(20000);
  }
  return ends;
}

std::vector<std::pair<std::string, std::string>> dir_files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out.emplace_back(std::filesystem::relative(e.path(), dir).string(), read_text_file(e.path().string()));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ar::test
