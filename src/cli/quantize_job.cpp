#include "cli/quantize_job.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "distributed/auth.h"
#include "distributed/job.h"

namespace ar::cli {

namespace {
void print_done(const QuantizeReport& r, const QuantizeOptions& qo) {
  char b[96];
  std::snprintf(b, sizeof b, "quantized %zu blocks in %.1f s (peak RSS %.0f MiB): ", r.blocks.size(), r.seconds,
                r.peak_rss_mb);
  log_result(b + qo.output_dir);
}
}  // namespace

void run_quantize(const QuantizeOptions& qo, const JobFlags& flags) {
  dist::LaunchEnv env = dist::detect_launch_env(dist::process_env(), flags.master_addr, flags.master_port);
  if (!env.multiprocess()) return print_done(quantize_model(qo), qo);
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store && std::string(agent_store) == "True" && flags.master_port == 0) {
    // torchrun's agent serves its own store on MASTER_PORT: ours takes the next port (--master_port overrides).
    env.master_port = env.master_port % 65535 + 1;
    log_info("torchrun's agent holds MASTER_PORT: the rendezvous uses port " + std::to_string(env.master_port));
  }
  if (env.rank != 0 && !qo.verbose) set_log_level(LogLevel::Warn);
  if (env.rank != 0) set_log_tag("rank " + std::to_string(env.rank));
  log_info(env.describe());
  dist::JobOptions jo;
  jo.timeout = std::chrono::milliseconds(int64_t(flags.timeout_s * 1000));
  jo.heartbeat = std::min(jo.heartbeat, jo.timeout / 4);
  jo.advertise_addr = flags.advertise_addr;
  if (const char* a = std::getenv("AR_ADVERTISE_ADDR"); jo.advertise_addr.empty() && a) jo.advertise_addr = a;
  jo.token = dist::job_token(flags.job_token_file, dist::process_env());
  std::unique_ptr<dist::Job> job = dist::Job::start(env, jo);
  QuantizeReport r;
  try {
    r = quantize_model(qo, job.get());
  } catch (const Error& e) {
    job->fail(e.what());
    throw Error(e.kind(), "rank " + std::to_string(env.rank) + " (" + job->host() + "): " + e.what());
  } catch (const std::exception& e) {
    job->fail(e.what());
    throw;
  }
  job->finish();
  if (env.rank == 0) print_done(r, qo);
}

}  // namespace ar::cli
