// The multi-process lane end to end, on Gloo over loopback: ranks of the CLI started with torchrun's
// variables (and through `autoround launch`) write the serial run's bytes for 2 and 4 processes and for
// 2 processes x 2 in-process devices (SignRound and opt-RTN; a generated model and stories260K); the
// batched mode is at parity; a SIGKILLed rank stops every rank within the timeout, naming it, with no
// output, and --resume then writes the uninterrupted bytes; a mismatched build, model or option is
// refused naming the ranks; an unreachable rendezvous and a port in use are clear errors in bounded time;
// two ranks in two network namespaces (a veth link) agree with serial where namespaces can be created.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "dist_ranks.h"
#include "slowloris.h"
#include "io/mapped_file.h"
#include "model/convert_llama2c.h"
#include "model/synthetic.h"
#include "multimodal_checkpoint.h"
#include "test_util.h"
#include "stories260k_model.h"

namespace fs = std::filesystem;
using ar::test::RankEnd;
using ar::test::RankSpec;

namespace {
constexpr double kJobTimeout = 600;  // a whole job on a loaded 2-core machine

std::vector<std::string> quant_args(const std::string& model, const std::string& out, int iters) {
  return {"--model", model, "--output_dir", out, "--iters", std::to_string(iters), "--nsamples", "8", "--seqlen", "64",
          "--bits", "4", "--group_size", "32", "--asym", "--threads", "1", "--timeout", "20"};
}

struct Fixture {
  std::string dir, model;
  Fixture(const std::string& name, int layers, int seed) : dir(ar::test::temp_path(name)) {
    fs::create_directories(dir);
    model = dir + "/model";
    ar::write_synthetic_model(model, ar::tiny_llama_config(layers), uint64_t(seed));
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string run_serial(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<RankSpec> one(1);
  one[0].args = args;
  auto r = ar::test::start_ranks(one, 0, dir, AR_CLI_PATH);  // world 1: a plain single process
  auto e = ar::test::wait_ranks(r, kJobTimeout);
  EXPECT_EQ(e[0].code, 0) << e[0].log;
  return e[0].log;
}

std::vector<RankEnd> run_job(int world, const std::vector<std::string>& args, const std::string& dir,
                             const std::vector<std::string>& extra = {}) {
  std::vector<RankSpec> specs(static_cast<size_t>(world));
  for (auto& s : specs) {
    s.args = args;
    s.args.insert(s.args.end(), extra.begin(), extra.end());
  }
  auto ranks = ar::test::start_ranks(specs, ar::test::free_port(), dir, AR_CLI_PATH);
  return ar::test::wait_ranks(ranks, kJobTimeout);
}

void expect_all_ok(const std::vector<RankEnd>& ends, const std::string& what) {
  for (size_t r = 0; r < ends.size(); ++r) EXPECT_EQ(ends[r].code, 0) << what << ": rank " << r << "\n" << ends[r].log;
}
}  // namespace

TEST(DistJob, ProcessSplitsWriteTheSerialBytes) {
  Fixture f("dj_bytes", 2, 31);
  struct Case {
    int iters;
    std::vector<std::string> extra;
  };
  // SignRound (asym), then opt-RTN (symmetric imatrix search: statistics gathered, modules divided).
  for (const Case& c : {Case{6, {}}, Case{0, {"--sym"}}}) {
    auto args = quant_args(f.model, f.dir + "/serial", c.iters);
    if (!c.extra.empty()) args.erase(std::find(args.begin(), args.end(), "--asym"));
    run_serial(args, f.dir);
    const auto ref = ar::test::dir_files(f.dir + "/serial");
    struct Split {
      int procs;
      std::vector<std::string> lane;
    };
    for (const Split& s : {Split{2, {}}, Split{4, {}}, Split{2, {"--parallel_quantization", "2", "--devices", "cpu:0,cpu:1"}}}) {
      auto a = args;
      a[3] = f.dir + "/job";
      const auto ends = run_job(s.procs, a, f.dir, s.lane);
      const std::string what = std::to_string(s.procs) + " processes" + (s.lane.empty() ? "" : " x 2 devices") +
                               ", iters " + std::to_string(c.iters);
      expect_all_ok(ends, what);
      EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ref) << what << " differs from serial";
      EXPECT_NE(ends[0].log.find("handshake: " + std::to_string(s.procs) + " processes agree"), std::string::npos)
          << ends[0].log;
      // No job token: rank 0 says its store is unauthenticated and listens on MASTER_ADDR only.
      EXPECT_NE(ends[0].log.find("rendezvous: unauthenticated (no AR_JOB_TOKEN or --job_token_file): the store "
                                 "listens on 127.0.0.1 only"),
                std::string::npos)
          << ends[0].log;
      for (size_t r = 1; r < ends.size(); ++r) EXPECT_EQ(ends[r].log.find("block 1/2"), std::string::npos) << "rank " << r << " logs";
      fs::remove_all(f.dir + "/job");
    }
    fs::remove_all(f.dir + "/serial");
  }
}

// A mixture-of-experts model across processes: every process routes its own shard, so experts see
// different token counts per process; the tree-summed gradient, the gathered per-expert imatrix and the
// added token counts make 2 processes write the serial bytes (SignRound, then opt-RTN), for Qwen2-MoE and
// for gpt-oss (sinks, windows, biased experts) and Qwen3-Next (a Gated DeltaNet layer, gated attention); and a
// dense Gemma 3 (sandwich norms, per-layer RoPE), also inside a multimodal checkpoint (the vision tensors
// copied by rank 0).
TEST(DistJob, MoeProcessSplitsWriteTheSerialBytes) {
  for (const char* arch : {"qwen2_moe", "gpt_oss", "gemma3", "gemma3_mm", "qwen3_next"}) {
    Fixture f(std::string("dj_moe_") + arch, 1, 33);
    const bool mm = std::string(arch) == "gemma3_mm";
    ar::write_synthetic_model(mm ? f.dir + "/text" : f.model, ar::tiny_family_config(mm ? "gemma3" : arch), 34);
    if (mm) ar::test::write_multimodal(f.dir + "/text", f.model, /*v5=*/false);
    for (const char* iters : {"4", "0"}) {
      auto args = quant_args(f.model, f.dir + "/serial", std::atoi(iters));
      args.erase(std::find(args.begin(), args.end(), "--asym"));  // symmetric: opt-RTN's imatrix search
      args.insert(args.end(), {"--report", f.dir + "/serial.json"});
      run_serial(args, f.dir);
      const auto ref = ar::test::dir_files(f.dir + "/serial");
      auto a = args;
      a[3] = f.dir + "/job";
      a.back() = f.dir + "/job.json";
      const auto ends = run_job(2, a, f.dir);
      expect_all_ok(ends, std::string("MoE, iters ") + iters);
      EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ref)
          << arch << " iters " << iters << ": 2 processes differ from serial";
      const auto tokens = [](const std::string& report) {
        return nlohmann::json::parse(ar::read_text_file(report))["blocks"][1]["expert_tokens"];
      };
      EXPECT_EQ(tokens(f.dir + "/job.json"), tokens(f.dir + "/serial.json"));
      EXPECT_EQ(tokens(f.dir + "/serial.json").size(), std::string(arch).starts_with("gemma3") ? 0u : 8u);  // dense
      for (const char* d : {"/serial", "/job", "/serial.json", "/job.json"}) fs::remove_all(f.dir + d);
    }
  }
}

// The float schemes across processes: NVFP4 SignRound (fused global scales, V and the coefficient
// tuned on sharded samples) and MXFP4 optimized RTN (imatrix gathered over the shards, modules divided
// among the processes), FP8_STATIC (activation maxima folded by max over the shards), written as
// llm_compressor: 2 processes write the serial bytes.
TEST(DistJob, FloatSchemesWriteTheSerialBytes) {
  Fixture f("dj_float", 2, 37);
  for (const std::vector<std::string>& scheme :
       {std::vector<std::string>{"--scheme", "NVFP4", "--act_bits", "16", "--iters", "4"},
        std::vector<std::string>{"--data_type", "mx_fp", "--iters", "0"},
        // the activation maxima: each process's shard, folded by max
        std::vector<std::string>{"--scheme", "FP8_STATIC", "--iters", "3"}}) {
    std::vector<std::string> args = {"--model", f.model, "--output_dir", f.dir + "/serial", "--nsamples", "8",
                                     "--seqlen", "64", "--format", "llm_compressor", "--threads", "1",
                                     "--timeout", "20"};
    args.insert(args.end(), scheme.begin(), scheme.end());
    run_serial(args, f.dir);
    const auto ref = ar::test::dir_files(f.dir + "/serial");
    auto a = args;
    a[3] = f.dir + "/job";
    const auto ends = run_job(2, a, f.dir);
    expect_all_ok(ends, scheme[1]);
    EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ref) << scheme[1] << ": 2 processes differ from serial";
    fs::remove_all(f.dir + "/job");
    fs::remove_all(f.dir + "/serial");
  }
}

// stories260K (converted), W4G32 asym, 20 iterations of 16 x 128 tokens: 2 and 4 processes equal serial
// byte for byte; batched (--deterministic false) 2 processes at parity: every block's best loss within 5% of
// serial's batched run (the micro-batch sums differ in order, so near-zero signs may flip).
TEST(DistJob, Stories260kProcessesAtParity) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string d = ar::test::temp_path("dj_s260");
  fs::create_directories(d);
  ar::test::convert_stories260k(fx, d + "/model");
  auto args = quant_args(d + "/model", d + "/serial", 20);
  args[7] = "16";
  args[9] = "128";
  run_serial(args, d);
  auto job = args;
  job[3] = d + "/job";
  for (int procs : {2, 4}) {
    expect_all_ok(run_job(procs, job, d), "stories260K, " + std::to_string(procs) + " processes");
    EXPECT_TRUE(ar::test::dir_files(d + "/job") == ar::test::dir_files(d + "/serial"))
        << procs << " processes differ from serial";
    fs::remove_all(d + "/job");
  }
  // Batched mode: reports of serial and 2 processes.
  for (auto* a : {&args, &job}) {
    a->insert(a->end(), {"--deterministic", "false", "--overwrite", "--report", (*a)[3] + ".json"});
  }
  run_serial(args, d);
  expect_all_ok(run_job(2, job, d), "stories260K batched, 2 processes");
  const auto rs = nlohmann::json::parse(ar::read_text_file(d + "/serial.json"));
  const auto rp = nlohmann::json::parse(ar::read_text_file(d + "/job.json"));
  ASSERT_EQ(rs["blocks"].size(), rp["blocks"].size());
  for (size_t b = 0; b < rs["blocks"].size(); ++b) {
    const double ls = rs["blocks"][b]["loss_best"], lp = rp["blocks"][b]["loss_best"];
    EXPECT_NEAR(lp, ls, 0.05 * ls) << "block " << b;
  }
  const double f0 = rs["blocks"][0]["loss_first"], p0 = rp["blocks"][0]["loss_first"];
  EXPECT_NEAR(p0, f0, 1e-5 * f0) << "block 0's first loss: same state, same batch";
  fs::remove_all(d);
}

// A rank SIGKILLed after the first block: the other stops within the timeout (20 s) naming rank 1, no
// output appears, the resume state stays; the same command with --resume writes the serial bytes.
TEST(DistJob, KilledRankStopsTheJobAndResumeFinishesIt) {
  Fixture f("dj_kill", 4, 33);
  auto args = quant_args(f.model, f.dir + "/serial", 40);
  run_serial(args, f.dir);
  args[3] = f.dir + "/out";
  args.push_back("--resume");
  std::vector<RankSpec> specs(2);
  for (auto& s : specs) s.args = args;
  const int port = ar::test::free_port();
  auto ranks = ar::test::start_ranks(specs, port, f.dir, AR_CLI_PATH);
  const std::string state = f.dir + "/out.partial/resume_state.json";
  bool killed = false;
  for (int i = 0; i < 60000 && !killed; ++i) {
    if (fs::exists(state) && ar::read_text_file(state).find("\"next_block\":1") != std::string::npos) {
      kill(ranks[1].pid, SIGKILL);
      killed = true;
    }
    usleep(5000);
  }
  ASSERT_TRUE(killed) << "the job finished before rank 1 could be killed";
  const auto ends = ar::test::wait_ranks(ranks, 120);
  EXPECT_EQ(ends[1].code, 128 + SIGKILL);
  EXPECT_EQ(ends[0].code, 3) << ends[0].log;
  EXPECT_LT(ends[0].seconds, 20 + 10) << "rank 0 took too long to stop";
  EXPECT_NE(ends[0].log.find("rank 1 ("), std::string::npos) << ends[0].log;
  EXPECT_NE(ends[0].log.find("lost"), std::string::npos) << ends[0].log;
  EXPECT_FALSE(fs::exists(f.dir + "/out")) << "a partial output appeared";
  EXPECT_TRUE(fs::exists(state)) << "the resume state was lost";
  auto again = ar::test::start_ranks(specs, ar::test::free_port(), f.dir, AR_CLI_PATH);
  const auto done = ar::test::wait_ranks(again, kJobTimeout);
  expect_all_ok(done, "resumed job");
  EXPECT_NE(done[0].log.find("after block 1/4"), std::string::npos) << done[0].log;
  EXPECT_TRUE(ar::test::dir_files(f.dir + "/out") == ar::test::dir_files(f.dir + "/serial")) << "resume differs";
}

// Mismatches found by the handshake: every rank stops with one error naming the field and the ranks.
TEST(DistJob, HandshakeRefusesMismatchedOptionsModelAndBuild) {
  Fixture f("dj_hand", 2, 35);
  const auto args = quant_args(f.model, f.dir + "/out", 4);
  // A copy of the model with one more file; a copy of the binary with one more byte (still runs).
  fs::copy(f.model, f.dir + "/model2", fs::copy_options::recursive);
  { std::ofstream(f.dir + "/model2/README.md") << "extra\n"; }
  fs::copy_file(AR_CLI_PATH, f.dir + "/autoround2");
  { std::ofstream(f.dir + "/autoround2", std::ios::app) << 'x'; }
  fs::permissions(f.dir + "/autoround2", fs::perms::owner_all);
  struct Case {
    std::string field;
    std::function<void(RankSpec&)> change;
  };
  for (const Case& c : {Case{"options", [](RankSpec& s) { s.args[5] = std::to_string(5); }},
                        Case{"model", [&](RankSpec& s) { s.args[1] = f.dir + "/model2"; }},
                        Case{"build", [&](RankSpec& s) { s.binary = f.dir + "/autoround2"; }}}) {
    std::vector<RankSpec> specs(2);
    for (auto& s : specs) s.args = args;
    c.change(specs[1]);
    auto ranks = ar::test::start_ranks(specs, ar::test::free_port(), f.dir, AR_CLI_PATH);
    const auto ends = ar::test::wait_ranks(ranks, 120);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_NE(ends[r].code, 0) << c.field << ": rank " << r;
      EXPECT_NE(ends[r].log.find("handshake: the ranks differ in " + c.field), std::string::npos)
          << c.field << ": rank " << r << "\n" << ends[r].log;
      EXPECT_NE(ends[r].log.find("rank 1 ("), std::string::npos) << ends[r].log;
    }
    EXPECT_FALSE(fs::exists(f.dir + "/out"));
  }
}

TEST(DistJob, UnreachableRendezvousAndPortInUseAreClearErrorsInBoundedTime) {
  Fixture f("dj_rdv", 2, 37);
  auto args = quant_args(f.model, f.dir + "/out", 2);
  args[args.size() - 1] = "3";  // --timeout 3
  // Rank 1 of 2 alone: nothing listens at the rendezvous.
  std::vector<RankSpec> specs(2);
  for (auto& s : specs) s.args = args;
  const int port = ar::test::free_port();
  specs[0].skip = true;  // rank 0 never shows up
  auto lonely = ar::test::start_ranks(specs, port, f.dir, AR_CLI_PATH);
  auto ends = ar::test::wait_ranks(lonely, 60);
  specs[0].skip = false;
  EXPECT_EQ(ends[1].code, 3) << ends[1].log;
  EXPECT_LT(ends[1].seconds, 3 + 5);
  EXPECT_NE(ends[1].log.find("cannot reach the rendezvous at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << ends[1].log;
  // Rank 0 on a port somebody else holds.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  auto busy = ar::test::start_ranks(specs, port, f.dir, AR_CLI_PATH);
  ends = ar::test::wait_ranks(busy, 60);
  close(fd);
  EXPECT_EQ(ends[0].code, 3) << ends[0].log;
  EXPECT_LT(ends[0].seconds, 5);
  EXPECT_NE(ends[0].log.find(std::to_string(port)), std::string::npos) << ends[0].log;
  EXPECT_NE(ends[0].log.find("in use"), std::string::npos) << ends[0].log;
  EXPECT_NE(ends[1].code, 0);
  EXPECT_FALSE(fs::exists(f.dir + "/out"));
}

// `autoround launch` starts the local ranks itself (one node, 2 processes) and the job writes the serial bytes.
TEST(DistJob, LaunchCommandRunsTheJob) {
  Fixture f("dj_launch", 2, 39);
  auto args = quant_args(f.model, f.dir + "/serial", 4);
  run_serial(args, f.dir);
  std::vector<RankSpec> one(1);
  one[0].args = {"launch", "--nproc_per_node", "2", "--master_port", std::to_string(ar::test::free_port()), "--"};
  args[3] = f.dir + "/job";
  one[0].args.insert(one[0].args.end(), args.begin(), args.end());
  auto r = ar::test::start_ranks(one, 0, f.dir, AR_CLI_PATH);
  const auto e = ar::test::wait_ranks(r, kJobTimeout);
  EXPECT_EQ(e[0].code, 0) << e[0].log;
  EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ar::test::dir_files(f.dir + "/serial"));
  // No AR_JOB_TOKEN in the environment: the launcher made one for its ranks.
  EXPECT_NE(e[0].log.find("a fresh job token authenticates this node's ranks"), std::string::npos) << e[0].log;
  EXPECT_NE(e[0].log.find("authenticated by the job token"), std::string::npos) << e[0].log;
}

namespace {
const std::string kJobToken = "dist-job-test-token-0123456789abcdef";

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}
std::string frame(uint8_t op, const std::string& fields) { return le32(uint32_t(1 + fields.size())) + char(op) + fields; }

// One stranger's connection to 127.0.0.1:port: sends `bytes`, keeps the socket `hold` long, closes.
// False while nothing listens there yet.
bool probe(int port, const std::string& bytes, std::chrono::milliseconds hold) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  const bool up = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (up) {
    (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(hold);
  }
  close(fd);
  return up;
}

// The serial run of f's model into f.dir/serial (the reference bytes), then the specs of a 2-rank job
// with a job token writing the same run into f.dir/job.
std::vector<RankSpec> serial_then_token_job(const Fixture& f) {
  auto args = quant_args(f.model, f.dir + "/serial", 30);
  run_serial(args, f.dir);
  args[3] = f.dir + "/job";
  std::vector<RankSpec> specs(2);
  for (auto& s : specs) {
    s.args = args;
    s.env = {"AR_JOB_TOKEN=" + kJobToken};
  }
  return specs;
}
}  // namespace

// Strangers on the rendezvous port of a 2-rank job with a job token, from before rank 0 listens until
// the job ends: an unauthenticated FAIL frame, a forged HELLO of rank 1, a 64 MiB length prefix and a
// slow half frame (two bytes, then silence), over and over. The job finishes and writes the serial
// run's bytes; rank 0's log names the dropped connections. (On an unauthenticated store, the forged
// HELLO alone took rank 1's place and the FAIL frame stopped the job.)
TEST(DistJob, StrangersOnTheRendezvousPortDoNotDisturbTheJob) {
  Fixture f("dj_hostile", 2, 43);
  const std::vector<RankSpec> specs = serial_then_token_job(f);
  const int port = ar::test::free_port();
  const std::string fields_hello = le32(1) + le32(8) + "stranger";
  const std::vector<std::pair<std::string, std::chrono::milliseconds>> probes = {
      {frame(4, fields_hello), std::chrono::milliseconds(20)},                  // HELLO rank 1
      {frame(6, le32(12) + "stop the job"), std::chrono::milliseconds(20)},     // FAIL
      {le32(64u << 20) + std::string(1, '\x01'), std::chrono::milliseconds(20)},  // a 64 MiB SET
      {std::string("\x10\x00", 2), std::chrono::milliseconds(300)}};            // a half length prefix
  std::atomic<bool> done{false};
  std::atomic<int> delivered{0};
  std::thread stranger([&] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(int(kJobTimeout));
    for (size_t i = 0; !done && std::chrono::steady_clock::now() < end; ++i) {
      if (probe(port, probes[i % probes.size()].first, probes[i % probes.size()].second)) ++delivered;
      else std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto ranks = ar::test::start_ranks(specs, port, f.dir, AR_CLI_PATH);
  const auto ends = ar::test::wait_ranks(ranks, kJobTimeout);
  done = true;
  stranger.join();
  expect_all_ok(ends, "a job with strangers on its port");
  EXPECT_GE(delivered.load(), int(probes.size())) << "every kind of probe reached the port";
  EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ar::test::dir_files(f.dir + "/serial"));
  EXPECT_NE(ends[0].log.find("authenticated by the job token"), std::string::npos) << ends[0].log;
  EXPECT_NE(ends[0].log.find("authentication failed"), std::string::npos) << ends[0].log;
}

// A slowloris on the rendezvous port from before rank 0 listens until the job ends, holding every slot
// for connections awaiting authentication (8 from the ranks' own address, 8 from each of 7 more) and
// reopening each one the store closes: the job finishes with the serial run's bytes. (Before the store
// displaced the oldest waiting connection, a rank's connection was closed at accept and the rank failed.)
TEST(DistJob, ASlowlorisOnTheRendezvousPortDoesNotStopTheJob) {
  Fixture f("dj_slowloris", 2, 47);
  const std::vector<RankSpec> specs = serial_then_token_job(f);
  const int port = ar::test::free_port();
  ar::test::Slowloris strangers(port, ar::test::loopback_sources(7), 8);
  auto ranks = ar::test::start_ranks(specs, port, f.dir, AR_CLI_PATH);
  const auto ends = ar::test::wait_ranks(ranks, kJobTimeout);
  expect_all_ok(ends, "a job behind a slowloris");
  EXPECT_GE(strangers.opened(), 64) << "the strangers held every waiting slot";
  EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ar::test::dir_files(f.dir + "/serial"));
}

// Ranks started with different tokens: rank 1 stops at once naming the token (exit 1); rank 0 logs the
// refused connection with the rank it claimed and stops after the timeout; no output.
TEST(DistJob, RanksWithDifferentTokensFailNamingTheRank) {
  Fixture f("dj_token", 2, 45);
  auto args = quant_args(f.model, f.dir + "/out", 2);
  args[args.size() - 1] = "3";  // --timeout 3
  std::vector<RankSpec> specs(2);
  for (auto& s : specs) s.args = args;
  specs[0].env = {"AR_JOB_TOKEN=" + kJobToken};
  specs[1].env = {"AR_JOB_TOKEN=" + kJobToken + "-other"};
  auto ranks = ar::test::start_ranks(specs, ar::test::free_port(), f.dir, AR_CLI_PATH);
  const auto ends = ar::test::wait_ranks(ranks, 60);
  EXPECT_EQ(ends[1].code, 1) << ends[1].log;
  EXPECT_NE(ends[1].log.find("(rank 1) refused this rank's job token"), std::string::npos) << ends[1].log;
  EXPECT_NE(ends[0].code, 0) << ends[0].log;
  EXPECT_NE(ends[0].log.find("(it claims rank 1): authentication failed: wrong job token"), std::string::npos)
      << ends[0].log;
  EXPECT_FALSE(fs::exists(f.dir + "/out"));
  // A token too short to be a secret is refused before anything starts.
  specs[0].env = specs[1].env = {"AR_JOB_TOKEN=short"};
  auto shorts = ar::test::start_ranks(specs, ar::test::free_port(), f.dir, AR_CLI_PATH);
  for (const auto& e : ar::test::wait_ranks(shorts, 60)) {
    EXPECT_EQ(e.code, 1) << e.log;
    EXPECT_NE(e.log.find("AR_JOB_TOKEN: a job token of 5 bytes is too short"), std::string::npos) << e.log;
  }
}

namespace {
// Two network namespaces joined by a veth pair (10.231.0.1 in A, 10.231.0.2 in B), removed on scope
// exit; ok() is false where namespaces cannot be created (no CAP_NET_ADMIN).
struct NetnsPair {
  std::string tag = std::to_string(getpid() % 100000), a = "ar_a" + tag, b = "ar_b" + tag;
  bool created = false;
  NetnsPair() {
    const std::string va = "va" + tag, vb = "vb" + tag;
    const std::string setup = "ip netns add " + a + " && ip netns add " + b + " && ip link add " + va +
                              " type veth peer name " + vb + " && ip link set " + va + " netns " + a +
                              " && ip link set " + vb + " netns " + b + " && ip -n " + a + " addr add 10.231.0.1/24 dev " +
                              va + " && ip -n " + b + " addr add 10.231.0.2/24 dev " + vb + " && ip -n " + a + " link set " +
                              va + " up && ip -n " + b + " link set " + vb + " up && ip -n " + a + " link set lo up && ip -n " +
                              b + " link set lo up";
    created = std::system((setup + " 2>/dev/null").c_str()) == 0;
  }
  ~NetnsPair() { (void)std::system(("ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null").c_str()); }
  void cut() const { (void)std::system(("ip -n " + b + " link set vb" + tag + " down").c_str()); }
  std::vector<RankSpec> specs(const std::vector<std::string>& args) const {
    std::vector<RankSpec> s(2);
    for (auto& r : s) {
      r.args = args;
      r.master_addr = "10.231.0.1";
    }
    s[0].prefix = {"ip", "netns", "exec", a};
    s[1].prefix = {"ip", "netns", "exec", b};
    return s;
  }
};
}  // namespace

// Two "hosts": rank 0 in network namespace A, rank 1 in B, joined by a veth pair (10.231.0.1 and .2);
// MASTER_ADDR is A's veth address. Skips where namespaces cannot be created (no CAP_NET_ADMIN).
TEST(DistJob, TwoNetworkNamespacesWriteTheSerialBytes) {
  NetnsPair ns;
  if (!ns.created) GTEST_SKIP() << "cannot create network namespaces here (needs CAP_NET_ADMIN)";
  Fixture f("dj_netns", 2, 41);
  auto args = quant_args(f.model, f.dir + "/serial", 4);
  run_serial(args, f.dir);
  args[3] = f.dir + "/job";
  auto ranks = ar::test::start_ranks(ns.specs(args), 29400 + int(getpid() % 500), f.dir, AR_CLI_PATH);
  const auto ends = ar::test::wait_ranks(ranks, kJobTimeout);
  expect_all_ok(ends, "two namespaces");
  EXPECT_NE(ends[0].log.find("10.231.0.1"), std::string::npos) << ends[0].log;
  EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ar::test::dir_files(f.dir + "/serial"));
}

// Rank 1's host cut off from the network mid-run (its veth taken down): both ranks stop within the
// timeout (5 s) plus a margin, each naming the other side as lost, and no output appears.
TEST(DistJob, RankCutOffFromTheNetworkStopsTheJob) {
  NetnsPair ns;
  if (!ns.created) GTEST_SKIP() << "cannot create network namespaces here (needs CAP_NET_ADMIN)";
  Fixture f("dj_cut", 4, 43);
  auto args = quant_args(f.model, f.dir + "/job", 400);
  args.back() = "5";  // --timeout 5
  auto ranks = ar::test::start_ranks(ns.specs(args), 29400 + int(getpid() % 500), f.dir, AR_CLI_PATH);
  bool started = false;
  for (int i = 0; i < 12000 && !started; ++i) {  // wait for tuning to start on rank 0
    started = fs::exists(ranks[0].log) && ar::read_text_file(ranks[0].log).find("lane:") != std::string::npos;
    usleep(10000);
  }
  if (!started) ar::test::wait_ranks(ranks, 0);  // stops them
  ASSERT_TRUE(started) << "rank 0 never started tuning";
  usleep(300000);
  ns.cut();
  const auto ends = ar::test::wait_ranks(ranks, 60);
  for (int r = 0; r < 2; ++r) {
    const std::string& log = ends[size_t(r)].log;
    std::printf("rank %d stopped %.1f s after the cut: %s", r, ends[size_t(r)].seconds,
                log.substr(log.rfind("error:") == std::string::npos ? 0 : log.rfind("error:")).c_str());
    EXPECT_EQ(ends[size_t(r)].code, 3) << "rank " << r << "\n" << ends[size_t(r)].log;
    EXPECT_LT(ends[size_t(r)].seconds, 5 + 10) << "rank " << r;
    EXPECT_NE(ends[size_t(r)].log.find("rank " + std::to_string(1 - r) + " ("), std::string::npos) << ends[size_t(r)].log;
    EXPECT_NE(ends[size_t(r)].log.find("lost"), std::string::npos) << ends[size_t(r)].log;
  }
  EXPECT_FALSE(fs::exists(f.dir + "/job"));
}

// Open MPI's mpirun starts the ranks (OMPI_COMM_WORLD_* variables, --master_addr for the rendezvous):
// the job writes the serial bytes. Skips where mpirun is not installed (scripts/setup.sh installs it).
TEST(DistJob, MpirunLaunchesTheJob) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun (openmpi-bin) not installed";
  Fixture f("dj_mpi", 2, 45);
  auto args = quant_args(f.model, f.dir + "/serial", 4);
  run_serial(args, f.dir);
  args[3] = f.dir + "/job";
  std::vector<RankSpec> one(1);
  one[0].binary = "mpirun";
  one[0].args = {"--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
                 "MASTER_PORT=" + std::to_string(ar::test::free_port()), AR_CLI_PATH};
  one[0].args.insert(one[0].args.end(), args.begin(), args.end());
  one[0].args.insert(one[0].args.end(), {"--master_addr", "127.0.0.1"});
  auto r = ar::test::start_ranks(one, 0, f.dir, AR_CLI_PATH);
  const auto e = ar::test::wait_ranks(r, kJobTimeout);
  EXPECT_EQ(e[0].code, 0) << e[0].log;
  EXPECT_NE(e[0].log.find("Open MPI: rank 0 of 2"), std::string::npos) << e[0].log;
  EXPECT_TRUE(ar::test::dir_files(f.dir + "/job") == ar::test::dir_files(f.dir + "/serial"));
}

// Rank 0 fails before any work (its output path is the model itself): rank 1 stops with rank 0's
// message, not just a broken connection, and nothing is written.
TEST(DistJob, AnEarlyFailureOfRankZeroReachesTheOthers) {
  Fixture f("dj_early", 2, 47);
  const auto args = quant_args(f.model, f.model, 2);  // --output_dir = the model: refused on rank 0
  std::vector<RankSpec> specs(2);
  for (auto& s : specs) s.args = args;
  auto ranks = ar::test::start_ranks(specs, ar::test::free_port(), f.dir, AR_CLI_PATH);
  const auto ends = ar::test::wait_ranks(ranks, 60);
  EXPECT_EQ(ends[0].code, 1) << ends[0].log;
  EXPECT_NE(ends[1].code, 0);
  EXPECT_NE(ends[1].log.find("rank 0 (host"), std::string::npos) << ends[1].log;
  EXPECT_NE(ends[1].log.find("is an input of this run"), std::string::npos) << ends[1].log;
  EXPECT_FALSE(fs::exists(f.model + "/autoround_output.json"));
}
