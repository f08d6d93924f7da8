// CLI contract: bad input gives one "error: ..." line naming the problem and a non-zero exit code;
// the convert -> eval -> generate path works end to end on a synthetic model.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <vector>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "io/mapped_file.h"
#include "io/safetensors.h"
#include <nlohmann/json.hpp>
#include "kernels/cpu/bf16_ops.h"
#include "model/synthetic.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {
struct CliResult {
  int code;
  std::string out;
};
CliResult run(const std::string& args, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + std::string(AR_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
std::string tmpdir(const std::string& n) {
  std::string d = ar::test::temp_path("cli_" + n);
  return d;
}
}  // namespace

TEST(Cli, BadInputsGiveOneErrorLineAndNonZeroExit) {
  std::string d = tmpdir("bad");
  fs::create_directories(d);
  CliResult r = run("eval --model " + d + " --text /dev/null");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "error: " + d + ": no config.json (not a Hugging Face model directory)\n");
  { std::ofstream(d + "/config.json") << R"({"architectures":["BertModel"]})"; }
  r = run("eval --model " + d + " --text /dev/null");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown architecture 'BertModel'"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  { std::ofstream(d + "/bad.bin") << "xx"; }
  r = run("convert --llama2c " + d + "/bad.bin --tokenizer " + d + "/bad.bin --out " + d + "/o");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("bad.bin: truncated llama2.c checkpoint"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "/o"));
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2);
  fs::remove_all(d);
}

TEST(Cli, EvalRefusesEmptyAndTooShortText) {
  std::string d = tmpdir("short");
  ar::write_synthetic_model(d, ar::tiny_llama_config(1), 4);
  CliResult r = run("eval --model " + d + " --text /dev/null");  // a device, even an empty one: refused
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--text /dev/null: a character device, not a regular file"), std::string::npos) << r.out;
  { std::ofstream(d + "/empty.txt"); }
  r = run("eval --model " + d + " --text " + d + "/empty.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("file is empty"), std::string::npos) << r.out;
  { std::ofstream(d + "/t.txt") << "a short text"; }
  r = run("eval --model " + d + " --text " + d + "/t.txt --ctx 64");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("fewer than one window of 64"), std::string::npos) << r.out;
  { std::ofstream(d + "/t.txt") << std::string(3000, 'x') << "\xff\xfe"; }
  r = run("eval --model " + d + " --text " + d + "/t.txt --ctx 64 --json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("t.txt: invalid UTF-8 at byte 3000"), std::string::npos) << r.out;
  fs::remove(d + "/tokenizer.bin");
  r = run("eval --model " + d + " --text " + d + "/t.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no tokenizer found"), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(Cli, ConvertGenerateEvalOnFixture) {
  AR_REQUIRE_FIXTURES(fx);
  std::string d = tmpdir("s260");
  std::string s = fx + "/stories260K/";
  CliResult r = run("convert --llama2c " + s + "stories260K.bin --tokenizer " + s + "tok512.bin --out " + d);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("convert --llama2c " + s + "stories260K.bin --tokenizer " + s + "tok512.bin --out " + d);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("exists"), std::string::npos);
  r = run("generate --model " + d + " --prompt 'Once upon a time' -n 60");
  EXPECT_EQ(r.code, 0);
  std::string expect = ar::read_text_file(s + "expected/prompt_once_upon_a_time_64steps.txt");
  EXPECT_EQ(r.out, expect + "\n");
  std::string text = d + "/short.txt";
  { std::ofstream(text) << "Once upon a time there was a cat."; }
  r = run("eval --model " + d + " --text " + text + " --json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("fewer than one window"), std::string::npos) << r.out;
  { std::ofstream(text) << ""; }
  r = run("eval --model " + d + " --text " + text);
  EXPECT_NE(r.out.find("file is empty"), std::string::npos) << r.out;
  { std::ofstream(text) << ar::read_text_file(fx + "/text/tinystories/tinystories_sample.txt").substr(0, 60000); }
  r = run("eval --model " + d + " --text " + text + " --ctx 128 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"ppl\":"), std::string::npos);
  // A context shorter than the request: the text stops there, and stderr says why.
  auto cfg = nlohmann::json::parse(ar::read_text_file(d + "/config.json"));
  cfg["max_position_embeddings"] = 8;
  { std::ofstream(d + "/config.json") << cfg.dump(); }
  r = run("generate --model " + d + " --prompt 'Once upon a time' -n 60");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string note = "generate: stopped at the model's context length (8 tokens) after 3 of 60 new tokens\n";
  ASSERT_GE(r.out.size(), note.size()) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - note.size()), note) << r.out;
  EXPECT_EQ(expect.rfind(r.out.substr(0, r.out.size() - note.size() - 1), 0), 0u) << r.out;  // a prefix of the 60
  fs::remove_all(d);
}

TEST(Cli, QuantizeSchemeRecipeAndExplicitFlags) {
  std::string d = tmpdir("recipe"), q = d + "_q";
  ar::write_synthetic_model(d, ar::tiny_llama_config(1), 4);
  CliResult r = run("--model " + d + " --scheme W2A16G32 --recipe light --iters 2 --nsamples 4 --seqlen 32 --output_dir " +
                    q + " --report " + q + ".json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("block 1/1: loss"), std::string::npos) << r.out;
  auto rep = nlohmann::json::parse(ar::read_text_file(q + ".json"));
  EXPECT_EQ(rep["bits"], 2);
  EXPECT_EQ(rep["group_size"], 32);
  EXPECT_EQ(rep["iters"], 2);          // explicit flag beats the recipe's 50
  EXPECT_DOUBLE_EQ(rep["lr"].get<double>(), 5e-3);  // from the light recipe
  EXPECT_TRUE(rep["blocks"][0].contains("phase_seconds"));
  r = run("--model " + d + " --scheme W5A16 --output_dir " + q + "_bad");
  EXPECT_EQ(r.code, 2);  // a bad option value is a usage error
  EXPECT_NE(r.out.find("--scheme 'W5A16' is not supported"), std::string::npos) << r.out;
  r = run("--model " + d + " --bits 5 --output_dir " + q + "_bad");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--bits 5 is not supported"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(q + "_bad"));
  r = run("--model " + d + " --iters 0 --nsamples 2 --seqlen 32 --output_dir " + q);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("exists"), std::string::npos) << r.out;
  fs::remove_all(d);
  fs::remove_all(q);
  fs::remove(q + ".json");
}

// --layer_config as AutoRound's CLI takes it (a shell-friendly dict): the summary names each own
// format, the output's extra_config holds it; a bad entry is a usage error naming it, before any work.
TEST(Cli, LayerConfigGivesLinearsTheirOwnFormat) {
  std::string d = tmpdir("lcfg"), q = d + "_q";
  ar::write_synthetic_model(d, ar::tiny_llama_config(1), 4);
  CliResult r = run("--model " + d + " --group_size 32 --iters 0 --nsamples 2 --seqlen 32 --output_dir " + q +
                    " --layer_config '{mlp.down_proj:{bits:8},self_attn.q_proj:BF16}'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("own formats: mlp.down_proj W8G32 sym in every block (--layer_config mlp.down_proj)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("self_attn.q_proj in every block (--layer_config self_attn.q_proj)"), std::string::npos) << r.out;
  const auto qc = nlohmann::json::parse(ar::read_text_file(q + "/config.json"))["quantization_config"];
  EXPECT_EQ(qc["extra_config"]["model.layers.0.mlp.down_proj"], nlohmann::json({{"bits", 8}})) << qc.dump();
  r = run("--model " + d + " --output_dir " + q + "_bad --layer_config '{mlp.down_proj:{bits:5}}'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--layer_config: 'mlp.down_proj': bits 5 is not supported"), std::string::npos) << r.out;
  r = run("--model " + d + " --output_dir " + q + "_bad --format auto_awq --layer_config '{down_proj:{bits:8}}'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("AWQ layout"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(q + "_bad"));
  fs::remove_all(d);
  fs::remove_all(q);
}

TEST(Cli, AmpChoiceIsLoggedAndChecked) {
  std::string d = tmpdir("amp"), q = d + "_q";
  ar::write_synthetic_model(d, ar::tiny_llama_config(1), 4);
  const std::string base = "--model " + d + " --iters 2 --nsamples 2 --seqlen 32 --overwrite --output_dir " + q;
  CliResult r = run(base + " --amp false");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("amp: off (--amp false)"), std::string::npos) << r.out;
  r = run(base + " --disable_amp");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("amp: off (--amp false)"), std::string::npos) << r.out;
  r = run(base);
  ASSERT_EQ(r.code, 0) << r.out;
  const bool bf16 = ar::cpu::bf16_gemm_supported();
  EXPECT_NE(r.out.find(bf16 ? "amp: on (default where the CPU has bf16 dot products" : "amp: off ("), std::string::npos)
      << r.out;
  r = run(base + " --amp maybe");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--amp 'maybe': expected true or false"), std::string::npos) << r.out;
  r = run(base + " --disable_amp --amp true");
  EXPECT_EQ(r.code, 2) << r.out;
  if (bf16) {  // oneDNN capped below bf16: the default turns amp off, --amp true is refused before any work
    r = run(base, "ONEDNN_MAX_CPU_ISA=AVX512_CORE");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(" present but oneDNN's ISA is limited"), std::string::npos) << r.out;
    fs::remove_all(q);
    r = run(base + " --amp true", "ONEDNN_MAX_CPU_ISA=AVX512_CORE");
    EXPECT_EQ(r.code, 1) << r.out;
    const std::string isa = ar::cpu::cpu_isa().amx_bf16 ? "amx_bf16" : "avx512_bf16";
    EXPECT_NE(r.out.find("--amp true: " + isa + " present but oneDNN's ISA is limited"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(q));
  }
  fs::remove_all(d);
  fs::remove_all(q);
}

// The start summary names the ISA level and what each hot path runs; AR_CPU_ISA caps all of it (our
// kernels, oneDNN, and OpenBLAS through the CLI's restart with OPENBLAS_CORETYPE), and an unknown level
// is refused before any work.
TEST(Cli, IsaLevelIsLoggedAndCapped) {
  std::string d = tmpdir("isa"), q = d + "_q";
  ar::write_synthetic_model(d, ar::tiny_llama_config(1), 4);
  const std::string base = "--model " + d + " --iters 2 --nsamples 2 --seqlen 32 --overwrite --output_dir " + q;
  const ar::cpu::Isa hw = ar::cpu::cpu_features().level();
  CliResult r = run(base, "env -u AR_CPU_ISA -u OPENBLAS_CORETYPE");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(std::string("[info] isa: ") + ar::cpu::isa_name(hw) + ";"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("QDQ backward, exp, bf16 conversion: "), std::string::npos) << r.out;
  if (hw >= ar::cpu::Isa::avx2 && r.out.find(", OpenBLAS ") != std::string::npos) {  // never a pre-AVX2 core
    const size_t at = r.out.find(", OpenBLAS ") + 11;
    const std::string core = r.out.substr(at, r.out.find(' ', at) - at);
    EXPECT_GE(ar::cpu::openblas_core_level(core), ar::cpu::Isa::avx2) << core;
  }
  if (hw >= ar::cpu::Isa::avx512) {
    r = run(base, "env -u OPENBLAS_CORETYPE AR_CPU_ISA=avx2");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("[info] isa: avx2 (capped by AR_CPU_ISA; the CPU has "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("fp32 GEMM: own FMA-chain kernel (avx2"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bf16 GEMM: none"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exp, bf16 conversion: avx2"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("amp: off"), std::string::npos) << r.out;
    const auto line = r.out.substr(r.out.find("[info] isa:"), r.out.find('\n', r.out.find("[info] isa:")) -
                                                                 r.out.find("[info] isa:"));
    EXPECT_EQ(line.find("avx512_core"), std::string::npos) << line;
  }
  r = run(base, "AR_CPU_ISA=avx9000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("error: AR_CPU_ISA: unknown level 'avx9000'"), std::string::npos) << r.out;
  fs::remove_all(d);
  fs::remove_all(q);
}

// The start estimate prices the searches it runs: --iters 0 (optimized RTN of the int scheme, a float
// scheme's, a GGUF preset's) and a tuned GGUF preset's fixed scales, by a probe of one block; a tuned
// int run has no search to price.
TEST(Cli, TheTimeEstimatePricesTheSearches) {
  std::string d = tmpdir("est"), q = d + "_q";
  ar::write_synthetic_model(d, ar::tiny_llama_config(2), 9);
  const std::string base = "--model " + d + " --nsamples 4 --seqlen 32 --overwrite --output_dir " + q;
  for (const char* opts : {"--iters 0", "--iters 0 --scheme MXFP4 --act_bits 16", "--iters 0 --format gguf:q4_k_m",
                           "--iters 2 --format gguf:q4_k_m"}) {
    const CliResult r = run(base + " " + opts);
    ASSERT_EQ(r.code, 0) << opts << "\n" << r.out;
    const size_t at = r.out.find("estimated time: ~");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find("'s search ~"), std::string::npos) << opts << ": " << line;
    EXPECT_NE(line.find("s per block, measured now on "), std::string::npos) << opts << ": " << line;
  }
  const CliResult tuned = run(base + " --iters 2");
  ASSERT_EQ(tuned.code, 0) << tuned.out;
  EXPECT_EQ(tuned.out.find("'s search ~"), std::string::npos) << tuned.out;
  fs::remove_all(d);
  fs::remove_all(q);
}

TEST(Cli, ParallelQuantizationFlags) {
  std::string d = tmpdir("par"), q = d + "_q";
  ar::write_synthetic_model(d, ar::tiny_llama_config(1), 9);
  const std::string base = "--model " + d + " --iters 2 --nsamples 4 --seqlen 32 --batch_size 4 --output_dir " + q;
  CliResult r = run(base + " --parallel_quantization 2 --devices cpu:0,cpu:1 --verbose --report " + q + ".json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("block 1 phases (world 2): mirrors"), std::string::npos) << r.out;
  auto rep = nlohmann::json::parse(ar::read_text_file(q + ".json"));
  EXPECT_EQ(rep["parallel_quantization"], "2");
  EXPECT_EQ(rep["blocks"][0]["world"]["tune"], 2);
  EXPECT_GT(rep["blocks"][0]["exchange_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(rep["blocks"][0]["phase_seconds"].contains("tune_exchange"));
  r = run(base + "_x --parallel_quantization two");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--parallel_quantization 'two'"), std::string::npos) << r.out;
  r = run(base + "_x --parallel_quantization 2 --devices cuda:0,cuda:1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("cuda:0: the data-parallel lane runs on CPU devices only"), std::string::npos) << r.out;
  r = run(base + "_x --parallel_quantization 3 --devices cpu:0,cpu:1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("needs 3 devices"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(q + "_x"));
  fs::remove_all(d);
  fs::remove_all(q);
  fs::remove(q + ".json");
}

// Interrupted runs leave nothing behind: SIGINT/SIGTERM/SIGHUP during tuning remove the temporary output
// and exit with 128 + signal; with --resume the state saved so far is kept for the next run.
TEST(Cli, SignalsRemoveTheTemporaryOutputAndExitWith128PlusSignal) {
  std::string d = tmpdir("sig");
  auto cfg = ar::tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  ar::write_synthetic_model(d + "/m", cfg, 3);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    for (bool resume : {false, true}) {
      const std::string out = d + "/out";
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        if (!std::freopen("/dev/null", "w", stderr)) _exit(126);
        std::vector<std::string> args = {AR_CLI_PATH, "--model", d + "/m", "--iters", "150", "--nsamples", "8",
                                         "--seqlen", "64", "--output_dir", out};
        if (resume) args.push_back("--resume");
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(AR_CLI_PATH, argv.data());
        _exit(127);
      }
      // Signal once the run is inside its work (with --resume: after the first saved block).
      const std::string wait_for = resume ? out + ".partial/resume_state.json" : out + ".autoround-tmp.";
      bool seen = false;
      for (int i = 0; i < 12000 && !seen; ++i) {  // up to 120 s on a loaded machine
        if (resume) {
          seen = fs::exists(wait_for);
        } else {
          for (const auto& e : fs::directory_iterator(d))
            if (e.path().string().rfind(wait_for, 0) == 0) seen = true;
        }
        if (!seen) usleep(10000);
      }
      ASSERT_TRUE(seen) << "the run never started writing";
      kill(pid, sig);
      int st = 0;
      waitpid(pid, &st, 0);
      ASSERT_TRUE(WIFEXITED(st)) << "signal " << sig << " killed the process instead of ending it cleanly";
      EXPECT_EQ(WEXITSTATUS(st), 128 + sig);
      std::vector<std::string> left;
      for (const auto& e : fs::directory_iterator(d)) left.push_back(e.path().filename().string());
      std::sort(left.begin(), left.end());
      const std::vector<std::string> expect =
          resume ? std::vector<std::string>{"m", "out.partial"} : std::vector<std::string>{"m"};
      EXPECT_EQ(left, expect) << "signal " << sig << (resume ? " with --resume" : "");
      fs::remove_all(out + ".partial");
    }
  }
  fs::remove_all(d);
}

// `nohup autoround ... &`: a signal ignored when the CLI starts stays ignored (SIGHUP at logout, SIGINT
// for a background job of a shell without job control), and the run finishes; a handled signal's message
// starts on a line of its own, not with an escaped line feed.
TEST(Cli, SignalsIgnoredAtStartStayIgnored) {
  std::string d = tmpdir("nohup");
  auto cfg = ar::tiny_llama_config(4);  // as above: long enough to be signalled mid-run
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  ar::write_synthetic_model(d + "/m", cfg, 3);
  for (int sig : {SIGHUP, SIGINT}) {
    for (bool ignored : {true, false}) {
      const std::string out = d + "/out", err = d + "/stderr.txt";
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        if (!std::freopen(err.c_str(), "w", stderr)) _exit(126);
        if (ignored) signal(sig, SIG_IGN);  // kept across exec, as nohup does for SIGHUP
        std::vector<std::string> args = {AR_CLI_PATH, "--model", d + "/m", "--iters", "150", "--nsamples", "8",
                                         "--seqlen", "64", "--output_dir", out};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(AR_CLI_PATH, argv.data());
        _exit(127);
      }
      bool seen = false;
      for (int i = 0; i < 12000 && !seen; ++i) {  // up to 120 s on a loaded machine
        for (const auto& e : fs::directory_iterator(d))
          if (e.path().string().rfind(out + ".autoround-tmp.", 0) == 0) seen = true;
        if (!seen) usleep(10000);
      }
      ASSERT_TRUE(seen) << "the run never started writing";
      kill(pid, sig);
      int st = 0;
      waitpid(pid, &st, 0);
      ASSERT_TRUE(WIFEXITED(st)) << "signal " << sig;
      const std::string said = ar::read_text_file(err);
      if (ignored) {
        EXPECT_EQ(WEXITSTATUS(st), 0) << "signal " << sig << " was ignored at start:\n" << said;
        EXPECT_TRUE(fs::exists(out + "/model.safetensors")) << "signal " << sig;
      } else {
        EXPECT_EQ(WEXITSTATUS(st), 128 + sig);
        EXPECT_NE(said.find(std::string("\ninterrupted by ") + strsignal(sig) + "\n"), std::string::npos) << said;
        EXPECT_EQ(said.find("\\x0a"), std::string::npos) << said;
        EXPECT_FALSE(fs::exists(out));
      }
      fs::remove_all(out);
    }
  }
  fs::remove_all(d);
}

namespace {
// SIGKILLs `pid` once its resume state records block 1 as done (polling up to 30 s); false when the
// run ended first. Reaps the process either way.
// Kills the run once its state file shows block 1 done; false if the run ended first. A slow run
// (sanitizers, a loaded machine: block 1 took over 30 s under TSan next to a CI build) is waited for
// up to 10 minutes.
bool kill_after_first_block(pid_t pid, const std::string& state) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  int st = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(state) && ar::read_text_file(state).find("\"next_block\":1") != std::string::npos) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return true;
    }
    if (waitpid(pid, &st, WNOHANG) == pid) return false;  // it finished before block 1 was seen
    usleep(5000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return false;
}

// Every file under `dir` (relative path -> content), to show that a refused command changed nothing.
std::map<std::string, std::string> tree_contents(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = ar::read_text_file(e.path().string());
  return files;
}
}  // namespace

// A --resume run started with relative paths from one directory, killed, continues from any other
// current directory (absolute paths this time) and writes the bytes of an uninterrupted run.
TEST(Cli, ResumeWorksFromAnotherCurrentDirectory) {
  std::string d = fs::absolute(tmpdir("rcwd")).string();
  auto cfg = ar::tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  ar::write_synthetic_model(d + "/m", cfg, 5);
  const std::string opts = " --iters 60 --nsamples 8 --seqlen 64";
  CliResult r = run("--model " + d + "/m" + opts + " --output_dir " + d + "/ref");
  ASSERT_EQ(r.code, 0) << r.out;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (chdir(d.c_str()) != 0 || !std::freopen("/dev/null", "w", stderr)) _exit(126);
    execl(AR_CLI_PATH, AR_CLI_PATH, "--model", "m", "--iters", "60", "--nsamples", "8", "--seqlen", "64",
          "--output_dir", "./out/", "--resume", nullptr);
    _exit(127);
  }
  ASSERT_TRUE(kill_after_first_block(pid, d + "/out.partial/resume_state.json"))
      << "the run finished before it could be killed";
  r = run("--model " + d + "/m" + opts + " --output_dir " + d + "/out --resume");  // cwd: the test's own
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming " + d + "/out after block 1/4"), std::string::npos) << r.out;
  EXPECT_EQ(ar::read_text_file(d + "/out/model.safetensors"), ar::read_text_file(d + "/ref/model.safetensors"));
  EXPECT_FALSE(fs::exists(d + "/out.partial"));
  fs::remove_all(d);
}

TEST(Cli, AnOutputDirectoryNameOf255BytesWorks) {
  // NAME_MAX is 255: the temporaries' suffixes (.autoround-tmp.XXXXXX, .partial) must not make the
  // run fail on a legal name (io/sibling_name.h).
  std::string d = fs::absolute(tmpdir("n255")).string();
  ar::write_synthetic_model(d + "/m", ar::tiny_llama_config(1), 5);
  const std::string out = d + "/" + std::string(255, 'o');
  for (const std::string extra : {"", " --resume --overwrite"}) {
    CliResult r = run("quantize --model " + d + "/m --iters 0 --nsamples 2 --seqlen 16 --output_dir " + out + extra);
    ASSERT_EQ(r.code, 0) << extra << "\n" << r.out;
    EXPECT_TRUE(fs::exists(out + "/model.safetensors")) << extra;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator{}), 2);  // m and the output
  fs::remove_all(d);
}

// The resume state holds the model by content (every file's size and checksum) and the options: a
// weight of block 0 changed after the kill, or another --iters, is refused naming what differs, and the
// refused runs change nothing (before, the changed model resumed and wrote the old model's bytes).
TEST(Cli, ResumeRefusesAChangedModelOrOptionNamingIt) {
  std::string d = fs::absolute(tmpdir("rchg")).string();
  auto cfg = ar::tiny_llama_config(4);
  cfg["hidden_size"] = 128;
  cfg["intermediate_size"] = 256;
  ar::write_synthetic_model(d + "/m", cfg, 6);
  auto args = [&](int iters) {
    return "--model " + d + "/m --iters " + std::to_string(iters) + " --nsamples 8 --seqlen 64 --output_dir " + d +
           "/out --resume";
  };
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!std::freopen("/dev/null", "w", stderr)) _exit(126);
    execl(AR_CLI_PATH, AR_CLI_PATH, "--model", (d + "/m").c_str(), "--iters", "60", "--nsamples", "8", "--seqlen",
          "64", "--output_dir", (d + "/out").c_str(), "--resume", nullptr);
    _exit(127);
  }
  ASSERT_TRUE(kill_after_first_block(pid, d + "/out.partial/resume_state.json"))
      << "the run finished before it could be killed";
  // One weight of block 0 changed in place (same size): its first float of q_proj.
  const std::string model = d + "/m/model.safetensors", original = ar::read_text_file(model);
  const ar::StHeader h = ar::parse_safetensors(reinterpret_cast<const uint8_t*>(original.data()), original.size(), model);
  uint64_t header_len = 0;
  std::memcpy(&header_len, original.data(), 8);
  std::string changed = original;
  for (const auto& t : h.tensors)
    if (t.name == "model.layers.0.self_attn.q_proj.weight") {
      const float v = 0.5f;
      std::memcpy(changed.data() + 8 + header_len + t.begin, &v, 4);
    }
  ASSERT_NE(changed, original);
  { std::ofstream(model, std::ios::binary | std::ios::trunc) << changed; }
  const auto before = tree_contents(d);
  CliResult r = run(args(60));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(d + "/out.partial/resume_state.json: corrupt or foreign resume state: model file "
                           "model.safetensors changed since the state was written"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1).rfind("error: ", 0), 0u) << r.out;
  EXPECT_TRUE(tree_contents(d) == before) << "the refused resume changed files";
  EXPECT_FALSE(fs::exists(d + "/out"));
  // The model back as it was, another option: refused naming the option and both values.
  { std::ofstream(model, std::ios::binary | std::ios::trunc) << original; }
  const auto before2 = tree_contents(d);
  r = run(args(61));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("resume_state.json: corrupt or foreign resume state: option 'iters' is 60 in the state, 61 in "
                       "this run"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(tree_contents(d) == before2) << "the refused resume changed files";
  fs::remove_all(d);
}
