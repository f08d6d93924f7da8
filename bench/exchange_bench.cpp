// The multi-process gradient sum alone (GlooProcessGroup::sum_tree), as one rank of a job started like
// the CLI (torchrun's variables, or `autoround launch`-style): per size, the seconds per sum and the
// bytes each rank receives, against a memcpy of the same buffer in the same run (what loopback TCP
// could at best approach). Rank 0 prints the table.
//   RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 exchange_bench [--mb 47] [--reps 10]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "distributed/job.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  double mb = 47;
  int reps = 10;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb")) mb = std::stod(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
  }
  const dist::LaunchEnv env = dist::detect_launch_env(dist::process_env());
  if (!env.multiprocess()) {
    std::fprintf(stderr, "exchange_bench: start it as every rank of a job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)\n");
    return 2;
  }
  auto job = dist::Job::start(env, dist::JobOptions{});
  auto& link = job->link();
  const int64_t n = int64_t(mb * 1e6 / 4);
  std::vector<float> g(static_cast<size_t>(n), 1.0f), copy(static_cast<size_t>(n));
  link.sum_tree(g.data(), n);  // warm-up: connections, pages
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) std::memcpy(copy.data(), g.data(), size_t(n) * 4);
  const double mem = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
  const int64_t before = link.bytes_received();
  const auto t1 = Clock::now();
  for (int r = 0; r < reps; ++r) link.sum_tree(g.data(), n);
  const double sum = std::chrono::duration<double>(Clock::now() - t1).count() / reps;
  const double in = double(link.bytes_received() - before) / reps;
  if (job->rank() == 0)
    std::printf("processes %d, %.1f MB fp32: sum_tree %.1f ms (%.2f GB/s received per rank, %.1f MB), memcpy %.2f ms\n",
                job->size(), mb, sum * 1e3, in / sum / 1e9, in / 1e6, mem * 1e3);
  job->finish();
  return 0;
}
