// Where a process sits in a multi-process job (distributed/launch_env.h) and the `autoround launch` supervisor
// (distributed/launcher.h), run with /bin/sh scripts as the ranks.
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "distributed/launch_env.h"
#include "distributed/launcher.h"
#include "test_util.h"

using namespace ar;
using namespace ar::dist;

namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup lookup(const Vars& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Runs f, expects an InvalidInput error whose message holds every one of `parts`.
template <class F>
void expect_invalid(F&& f, const std::vector<std::string>& parts, const std::string& row) {
  try {
    f();
    ADD_FAILURE() << row << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << row << ": " << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << row << ": " << e.what();
  }
}

}  // namespace

TEST(LaunchEnv, DetectsEachLauncher) {
  struct Row {
    const char* what;
    Vars vars;
    LaunchEnv::Source source;
    int rank, world, local_rank, local_world, node_rank;
    std::string addr;
    int port;
  };
  using S = LaunchEnv::Source;
  const Row rows[] = {
      {"no launcher", {}, S::None, 0, 1, 0, 1, 0, "", 29500},
      {"torchrun",
       {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}},
       S::Torchrun, 1, 4, 1, 2, 0, "10.0.0.1", 29500},
      {"torchrun, no local variables",
       {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}},
       S::Torchrun, 3, 4, 3, 4, 0, "h", 1234},
      {"torchrun, node from rank / local world",
       {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}},
       S::Torchrun, 5, 8, 1, 4, 1, "h", 29500},
      {"torchrun, GROUP_RANK",
       {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "3"},
        {"MASTER_ADDR", "h"}},
       S::Torchrun, 5, 8, 1, 2, 3, "h", 29500},
      {"torchrun, world 1 needs no address", {{"RANK", "0"}, {"WORLD_SIZE", "1"}}, S::Torchrun, 0, 1, 0, 1, 0, "", 29500},
      {"Open MPI",
       {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29501"}},
       S::OpenMpi, 3, 4, 1, 2, 1, "m", 29501},
      {"PMI",
       {{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}, {"MASTER_ADDR", "m"}},
       S::Pmi, 2, 4, 0, 2, 1, "m", 29500},
      {"Slurm, step node list with ranges",
       {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
        {"SLURM_STEP_TASKS_PER_NODE", "2(x4)"}, {"SLURM_STEP_NODELIST", "node[01-04,07],gpu2"},
        {"SLURM_JOB_NODELIST", "other[1-9]"}},
       S::Slurm, 5, 8, 1, 2, 2, "node01", 29500},
      {"Slurm, job lists, uneven tasks per node",
       {{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "3"},
        {"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_JOB_NODELIST", "n[1-2]"}},
       S::Slurm, 6, 7, 0, 1, 3, "n1", 29500},
      {"Slurm, plain node list, node index past the list takes the first count",
       {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "5"},
        {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_STEP_NODELIST", "a,b"}},
       S::Slurm, 1, 4, 1, 2, 5, "a", 29500},
      {"Slurm, allocation larger than the step",
       {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "8"},
        {"SLURM_JOB_NODELIST", "a"}},
       S::Slurm, 1, 2, 1, 2, 0, "a", 29500},
      {"Slurm, MASTER_ADDR wins over the node list",
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"},
        {"SLURM_STEP_NODELIST", "a,b"}, {"MASTER_ADDR", "x"}},
       S::Slurm, 0, 2, 0, 2, 0, "x", 29500},
      {"torchrun variables win over Slurm's",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "t"},
        {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}, {"SLURM_STEP_NODELIST", "s1"},
        {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}},
       S::Torchrun, 1, 2, 1, 2, 0, "t", 29500},
      {"only RANK set: not torchrun",
       {{"RANK", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"},
        {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}, {"SLURM_STEP_NODELIST", "g[7-8]"}},
       S::Slurm, 1, 2, 0, 1, 1, "g7", 29500},
  };
  for (const Row& r : rows) {
    const LaunchEnv e = detect_launch_env(lookup(r.vars));
    EXPECT_EQ(e.source, r.source) << r.what;
    EXPECT_EQ(e.rank, r.rank) << r.what;
    EXPECT_EQ(e.world, r.world) << r.what;
    EXPECT_EQ(e.local_rank, r.local_rank) << r.what;
    EXPECT_EQ(e.local_world, r.local_world) << r.what;
    EXPECT_EQ(e.node_rank, r.node_rank) << r.what;
    EXPECT_EQ(e.master_addr, r.addr) << r.what;
    EXPECT_EQ(e.master_port, r.port) << r.what;
    EXPECT_EQ(e.multiprocess(), r.world > 1) << r.what;
  }
}

TEST(LaunchEnv, Describe) {
  const Vars torchrun = {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "10.0.0.1"}};
  EXPECT_EQ(detect_launch_env(lookup(torchrun)).describe(),
            "torchrun: rank 1 of 4 (local 1 of 2, node 0), rendezvous 10.0.0.1:29500");
  EXPECT_EQ(detect_launch_env(lookup({})).describe(), "single process");
}

TEST(LaunchEnv, FlagsOverrideMasterAddrAndPort) {
  const Vars v = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "env-host"}, {"MASTER_PORT", "1111"}};
  LaunchEnv e = detect_launch_env(lookup(v), "flag-host", 2222);
  EXPECT_EQ(e.master_addr, "flag-host");
  EXPECT_EQ(e.master_port, 2222);
  e = detect_launch_env(lookup(v));
  EXPECT_EQ(e.master_addr, "env-host");
  EXPECT_EQ(e.master_port, 1111);
  // The flag supplies the address a launcher without MASTER_ADDR lacks.
  e = detect_launch_env(lookup({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), "10.1.1.1", 0);
  EXPECT_EQ(e.master_addr, "10.1.1.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, FirstSlurmHost) {
  const std::pair<const char*, const char*> rows[] = {
      {"node[01-04,07],gpu2", "node01"}, {"n[1-2]", "n1"},          {"a,b", "a"},
      {"node007", "node007"},            {"gpu[7,3]", "gpu7"},      {"rack[1-2]-node[01-04]", "rack1-node01"},
      {"x[003]-ib", "x003-ib"},          {"a[10-11],b[1-2]", "a10"}};
  for (const auto& [list, host] : rows) EXPECT_EQ(first_slurm_host(list), host) << list;
  for (const char* bad : {"", "node[01-04", ",a", "n[]", "n[-3]"})
    expect_invalid([&] { first_slurm_host(bad); }, {std::string("'") + bad + "'"}, bad);
}

TEST(LaunchEnv, ErrorsNameTheVariableAndValue) {
  struct Row {
    Vars vars;
    std::string addr_flag;
    int port_flag;
    std::vector<std::string> parts;
  };
  const Vars ok = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  auto with = [&](Vars extra) {
    Vars v = ok;
    for (auto& [k, x] : extra) v[k] = x;
    return v;
  };
  const Vars slurm = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}};
  auto slurm_with = [&](Vars extra) {
    Vars v = slurm;
    for (auto& [k, x] : extra) v[k] = x;
    return v;
  };
  const Row rows[] = {
      {with({{"RANK", "abc"}}), "", 0, {"RANK='abc'", "not an integer"}},
      {with({{"RANK", ""}}), "", 0, {"RANK=''"}},
      {with({{"RANK", " 1"}}), "", 0, {"RANK=' 1'"}},
      {with({{"WORLD_SIZE", "2x"}}), "", 0, {"WORLD_SIZE='2x'"}},
      {with({{"WORLD_SIZE", "99999999999"}}), "", 0, {"WORLD_SIZE=99999999999"}},
      {with({{"WORLD_SIZE", "0"}}), "", 0, {"WORLD_SIZE=0", "at least 1"}},
      {with({{"RANK", "-1"}}), "", 0, {"RANK=-1"}},
      {with({{"RANK", "2"}}), "", 0, {"RANK=2", "WORLD_SIZE=2"}},
      {with({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}), "", 0, {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"}},
      {with({{"LOCAL_WORLD_SIZE", "0"}}), "", 0, {"LOCAL_WORLD_SIZE=0"}},
      {with({{"LOCAL_WORLD_SIZE", "4"}}), "", 0, {"LOCAL_WORLD_SIZE=4", "WORLD_SIZE=2"}},
      {with({{"GROUP_RANK", "x"}}), "", 0, {"GROUP_RANK='x'"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "", 0, {"MASTER_ADDR", "--master_addr", "rank 0 of 2"}},
      {with({{"MASTER_PORT", "0"}}), "", 0, {"MASTER_PORT=0", "1..65535"}},
      {with({{"MASTER_PORT", "70000"}}), "", 0, {"MASTER_PORT=70000"}},
      {with({{"MASTER_PORT", "http"}}), "", 0, {"MASTER_PORT='http'"}},
      {ok, "", 70000, {"--master_port 70000", "1..65535"}},
      {ok, "", -3, {"--master_port -3"}},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "x"}},
       "h", 0, {"OMPI_COMM_WORLD_LOCAL_RANK='x'"}},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "4"}}, "h", 0, {"PMI_RANK=5", "PMI_SIZE=4"}},
      {slurm_with({{"SLURM_STEP_TASKS_PER_NODE", "2(x"}}), "h", 0, {"SLURM_STEP_TASKS_PER_NODE='2(x'"}},
      {slurm_with({{"SLURM_TASKS_PER_NODE", "2(x0)"}}), "h", 0, {"SLURM_TASKS_PER_NODE='2(x0)'"}},
      {slurm_with({{"SLURM_TASKS_PER_NODE", "2,,1"}}), "h", 0, {"SLURM_TASKS_PER_NODE='2,,1'"}},
      {slurm_with({{"SLURM_STEP_TASKS_PER_NODE", "1"}, {"SLURM_LOCALID", "1"}, {"SLURM_PROCID", "1"}}), "h", 0,
       {"SLURM_LOCALID=1", "SLURM_STEP_TASKS_PER_NODE=1"}},
      {slurm_with({{"SLURM_TASKS_PER_NODE", "1(x2)"}, {"SLURM_LOCALID", "1"}, {"SLURM_PROCID", "1"}}), "h", 0,
       {"SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=1"}},
      {slurm_with({{"SLURM_NODEID", "-2"}}), "h", 0, {"SLURM_NODEID=-2"}},
      {slurm_with({{"SLURM_STEP_NODELIST", "node[01"}}), "", 0, {"SLURM_STEP_NODELIST='node[01'"}},
      {slurm, "", 0, {"MASTER_ADDR", "--master_addr"}},
  };
  for (const Row& r : rows) {
    std::string what;
    for (const auto& [k, v] : r.vars) what += k + "=" + v + " ";
    expect_invalid([&] { detect_launch_env(lookup(r.vars), r.addr_flag, r.port_flag); }, r.parts, what);
  }
}

TEST(LaunchEnv, ProcessEnvReadsGetenv) {
  setenv("AR_TEST_LAUNCH_VAR", "v1", 1);
  unsetenv("AR_TEST_LAUNCH_UNSET");
  const EnvLookup env = process_env();
  EXPECT_EQ(env("AR_TEST_LAUNCH_VAR"), std::optional<std::string>("v1"));
  EXPECT_EQ(env("AR_TEST_LAUNCH_UNSET"), std::nullopt);
  unsetenv("AR_TEST_LAUNCH_VAR");
}

// ---- the launcher, with /bin/sh scripts as the ranks ----

namespace {

class Launcher : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ar_launch_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  LaunchOptions sh(const std::string& script, int nproc = 2) const {
    LaunchOptions o;
    o.nproc_per_node = nproc;
    o.self_exe = "/bin/sh";
    o.args = {"-c", "D=" + dir_ + "\n" + script};
    o.grace_s = 1;
    return o;
  }
  std::string read(const std::string& name) const {
    std::ifstream f(dir_ + "/" + name);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // The pid a rank wrote into `name` (waits for it: the launcher may return before a write is visible).
  pid_t pid_in(const std::string& name) const {
    const std::string s = read(name);
    return s.empty() ? -1 : pid_t(std::stol(s));
  }
  static bool gone(pid_t pid) { return pid > 0 && kill(pid, 0) == -1 && errno == ESRCH; }

  // Runs the launcher and returns its code and how long it took.
  static std::pair<int, double> timed(const LaunchOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = run_launcher(o);
    return {rc, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }

  std::string dir_;
};

// Rank 1 writes its pid into $D/pid and becomes (exec) a long sleep; `rank0` runs once it has.
std::string sleeper_and(const std::string& rank0, const std::string& sleeper_prefix = "") {
  return "if [ \"$LOCAL_RANK\" = 1 ]; then " + sleeper_prefix + "echo $$ > $D/pid.tmp; mv $D/pid.tmp $D/pid; exec sleep 100; fi\n"
         "while [ ! -s $D/pid ]; do sleep 0.02; done\n" + rank0 + "\n";
}

}  // namespace

TEST_F(Launcher, AllRanksSucceedWithTheirVariables) {
  setenv("RANK", "77", 1);  // inherited launcher variables are replaced, the rest passed on
  setenv("AR_TEST_INHERITED", "yes", 1);
  LaunchOptions o = sh("echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
                       "$MASTER_PORT $AR_ADVERTISE_ADDR $AR_TEST_INHERITED $0\" > $D/rank_$RANK");
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.1.2.3";
  o.master_port = 29600;
  o.advertise_addr = "10.9.9.9";
  const int rc = run_launcher(o);
  unsetenv("RANK");
  unsetenv("AR_TEST_INHERITED");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(read("rank_2"), "2 4 0 2 1 10.1.2.3 29600 10.9.9.9 yes /bin/sh\n");
  EXPECT_EQ(read("rank_3"), "3 4 1 2 1 10.1.2.3 29600 10.9.9.9 yes /bin/sh\n");
}

TEST_F(Launcher, OneFailureStopsTheOthersAndGivesItsCode) {
  const auto [rc, seconds] = timed(sh(sleeper_and("exit 3")));
  EXPECT_EQ(rc, 3);
  EXPECT_LT(seconds, 5.0);
  EXPECT_TRUE(gone(pid_in("pid"))) << "the sleeping rank survived";
  std::printf("failure to stop: %.3f s\n", seconds);
}

TEST_F(Launcher, RankKilledBySignalGives128PlusSignal) {
  const auto [rc, seconds] = timed(sh(sleeper_and("kill -9 $$")));
  EXPECT_EQ(rc, 128 + SIGKILL);
  EXPECT_LT(seconds, 5.0);
  EXPECT_TRUE(gone(pid_in("pid")));
  std::printf("signal to stop: %.3f s\n", seconds);
}

TEST_F(Launcher, RankIgnoringSigtermIsKilledAfterGrace) {
  const auto [rc, seconds] = timed(sh(sleeper_and("exit 5", "trap '' TERM; ")));
  EXPECT_EQ(rc, 5);
  EXPECT_GE(seconds, 1.0);  // the grace period was waited out
  EXPECT_LT(seconds, 5.0);
  EXPECT_TRUE(gone(pid_in("pid")));
  std::printf("SIGTERM ignored, stopped after grace 1 s: %.3f s\n", seconds);
}

TEST_F(Launcher, ForwardsSigtermAndReturns128PlusSignal) {
  // Each rank records the forwarded signal, then ends cleanly; the launcher still reports the signal.
  const std::string script =
      "trap 'kill $S; echo term > $D/term_$LOCAL_RANK; exit 0' TERM\n"
      "sleep 100 & S=$!\n"
      "echo $$ > $D/ready_$LOCAL_RANK\n"
      "wait\n";
  std::thread sender([this] {
    for (int i = 0; i < 500 && (read("ready_0").empty() || read("ready_1").empty()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Only while the ranks wait: a signal after the launcher returned would end the test binary.
    if (!read("ready_0").empty() && !read("ready_1").empty()) kill(getpid(), SIGTERM);
  });
  const auto [rc, seconds] = timed(sh(script));
  sender.join();
  EXPECT_EQ(rc, 128 + SIGTERM);
  EXPECT_EQ(read("term_0"), "term\n");
  EXPECT_EQ(read("term_1"), "term\n");
  EXPECT_LT(seconds, 5.0);
}

// `nohup autoround launch ...`: a signal ignored when the launcher starts is neither handled nor
// forwarded, and the ranks inherit it ignored, so a logout's SIGHUP to all of them ends nothing.
TEST_F(Launcher, ASignalIgnoredAtStartStaysIgnored) {
  struct sigaction ignore = {}, before = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, &before);
  const std::string script =
      "echo $$ > $D/ready_$LOCAL_RANK\n"
      "while [ ! -e $D/go ]; do sleep 0.02; done\n"
      "exit 0\n";
  std::thread sender([this] {
    for (int i = 0; i < 500 && (pid_in("ready_0") <= 0 || pid_in("ready_1") <= 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (const char* f : {"ready_0", "ready_1"})
      if (pid_in(f) > 0) kill(pid_in(f), SIGHUP);
    kill(getpid(), SIGHUP);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(dir_ + "/go") << "go\n";
  });
  const auto [rc, seconds] = timed(sh(script));
  sender.join();
  sigaction(SIGHUP, &before, nullptr);
  EXPECT_EQ(rc, 0) << "SIGHUP, ignored at start, stopped the job";
  EXPECT_LT(seconds, 10.0);
}

TEST_F(Launcher, RanksDieWithAKilledLauncher) {
  // The launcher runs in a forked copy of this test, which is SIGKILLed once both ranks sleep.
  const LaunchOptions o = sh("echo $$ > $D/tmp_$LOCAL_RANK; mv $D/tmp_$LOCAL_RANK $D/pid_$LOCAL_RANK; exec sleep 100");
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) _exit(run_launcher(o));
  for (int i = 0; i < 500 && (pid_in("pid_0") <= 0 || pid_in("pid_1") <= 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  // Orphans are reaped by init (or a subreaper); a zombie counts as dead.
  auto dead = [](pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    return line.substr(line.rfind(')') + 2, 1) == "Z";
  };
  for (const char* f : {"pid_0", "pid_1"}) {
    const pid_t pid = pid_in(f);
    ASSERT_GT(pid, 0) << f;
    bool died = false;
    for (int i = 0; i < 200 && !(died = dead(pid)); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(died) << f << " (pid " << pid << ") outlived its launcher";
  }
}

TEST_F(Launcher, InvalidOptionsNameTheFlag) {
  struct Row {
    std::function<void(LaunchOptions&)> set;
    std::string flag;
  };
  const Row rows[] = {
      {[](LaunchOptions& o) { o.nnodes = 0; }, "--nnodes 0"},
      {[](LaunchOptions& o) { o.nproc_per_node = 0; }, "--nproc_per_node 0"},
      {[](LaunchOptions& o) { o.nnodes = 2, o.node_rank = 2; }, "--node_rank 2"},
      {[](LaunchOptions& o) { o.node_rank = -1; }, "--node_rank -1"},
      {[](LaunchOptions& o) { o.master_port = 0; }, "--master_port 0"},
      {[](LaunchOptions& o) { o.master_port = 65536; }, "--master_port 65536"},
      {[](LaunchOptions& o) { o.master_addr.clear(); }, "--master_addr"},
      {[](LaunchOptions& o) { o.grace_s = -1; }, "--grace -1"},
      {[](LaunchOptions& o) { o.nnodes = 65536, o.nproc_per_node = 65536; }, "--nproc_per_node 65536"},
      {[](LaunchOptions& o) { o.args.clear(); }, "--"},
  };
  for (const Row& r : rows) {
    LaunchOptions o = sh("exit 0");
    r.set(o);
    expect_invalid([&] { run_launcher(o); }, {r.flag}, r.flag);
  }
}

TEST_F(Launcher, MissingExecutableIsAnIoError) {
  LaunchOptions o = sh("exit 0");
  o.self_exe = dir_ + "/no-such-binary";
  try {
    run_launcher(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("no-such-binary"), std::string::npos) << e.what();
  }
}
