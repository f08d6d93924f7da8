// auto-round's command-line habits (issue 11, item 3): every accepted flag with its note, every
// unsupported value with its error, --version, top-level --help, typo suggestions, hub names looked up
// in a (fake) Hugging Face cache.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "model/synthetic.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {
struct CliOut {
  int code;
  std::string out;
};
CliOut run(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " " + std::string(AR_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

struct Row {
  const char* flags;
  int code;
  const char* message;  // substring of the output ("" : none required)
};
void PrintTo(const Row& r, std::ostream* os) { *os << r.flags; }

// Flags accepted (exit 0, with the note where they change nothing) or refused (exit 2, saying what is
// supported), on a tiny model quantized with RTN.
const Row kRows[] = {
    {"--sym", 0, ""},
    {"--data_type int", 0, ""},
    {"--nblocks 1", 0, ""},
    {"--act_bits 16", 0, ""},
    {"--scheme w4a16", 0, ""},
    {"--scheme W2a16g32", 0, ""},
    {"--deterministic", 0, ""},
    {"--deterministic false", 0, ""},
    {"--device cpu", 0, ""},
    {"--device_map cpu", 0, ""},
    {"--scale_dtype fp16", 0, ""},
    {"--low_gpu_mem_usage", 0, "--low_gpu_mem_usage: no effect here (the model is memory-mapped"},
    {"--disable_eval", 0, "--disable_eval: no effect here (no evaluation runs after quantizing"},
    {"--enable_torch_compile", 0, "--enable_torch_compile: no effect here (native kernels"},
    {"--model_dtype bfloat16", 0, "--model_dtype: no effect here (weights are read in their stored dtype"},
    {"--data_type mx_fp --format llm_compressor", 0, "quantizing MXFP4 weights (16-bit activations) with optimized RTN"},
    {"--data_type mx_fp --disable_opt_rtn --format llm_compressor", 0, ""},
    {"--data_type nv_fp --disable_opt_rtn", 0, "quantizing NVFP4 weights (16-bit activations) with RTN"},
    {"--data_type fp --format llm_compressor", 0, ""},
    {"--scheme FPW8A16 --format llm_compressor,fake", 0, ""},
    {"--data_type fp", 2, "--format auto_round cannot hold FP8 per channel weights"},
    {"--data_type nv_fp --bits 8", 2, "--data_type nv_fp has 4 bits (--bits 8)"},
    {"--data_type mx_fp --bits 3", 2, "--bits 3 is not a float weight width (4: E2M1, 8: E4M3)"},
    {"--data_type mx_fp --group_size 64 --disable_opt_rtn", 2, "MXFP4 has blocks of 32 (--group_size 64)"},
    {"--data_type bf16", 2, "--data_type bf16 is not supported (int, mx_fp, mx_fp_rceil, nv_fp, fp)"},
    {"--scheme MXFP4", 2, "--scheme MXFP4 quantizes activations to 4 bits, which needs dynamic activation quantization"},
    {"--scheme FP8_BLOCK --format llm_compressor", 2, "--scheme FP8_BLOCK quantizes activations to 8 bits, which needs dynamic"},
    {"--scheme FP8_STATIC --format llm_compressor", 0,
     "quantizing FP8 per channel weights (static FP8 activations: scales from the calibration maxima) with"},
    {"--scheme FP8_STATIC --format auto_round", 0, ""},
    {"--scheme FP8_STATIC --act_bits 16", 2, "--format auto_round cannot hold FP8 per channel weights"},
    {"--data_type fp --act_bits 8 --format llm_compressor", 2, "--act_bits 8 needs dynamic activation quantization"},
    {"--data_type mx_fp --asym --format llm_compressor", 2, "MXFP4 is symmetric (--asym is for int weights)"},
    {"--scheme NVFP4 --act_bits 16 --disable_opt_rtn --format auto_gptq", 2, "--format auto_gptq cannot hold NVFP4 weights"},
    {"--format llm_compressor", 2, "--format llm_compressor writes the float schemes"},
    {"--nblocks 4", 2, "--nblocks 4 is not supported (1: blocks are tuned one at a time)"},
    {"--act_bits 8", 2, "--act_bits 8 needs dynamic activation quantization"},
    {"--tasks lambada", 2, "--tasks: evaluation tasks are not run here; measure the output with `autoround eval"},
    {"--scale_dtype fp32", 2, "--scale_dtype fp32 is not supported (fp16"},
    {"--model_dtype int8", 2, "--model_dtype int8 is not supported (auto, float32, bfloat16, float16)"},
    {"--sym --asym", 2, "--sym and --asym contradict each other"},
    {"--scheme w5a16", 2, "--scheme 'w5a16' is not supported"},
    {"--device_map auto", 0, ""},
    {"--format auto_round,auto_gptq", 0, ""},
    {"--format auto_round,gguf:q4_k_m", 0, ""},
    {"--format gguf:q4_k_m,gguf:q8_0", 2, "--format lists two GGUF presets (gguf:q4_k_m, gguf:q8_0)"},
    {"--format gguf:q4_k_m,fake", 0, ""},
    {"--format gguf:q4_k_x", 2, "--format gguf:q4_k_x: unknown GGUF preset"},
    {"--format auto_round,auto_round", 2, "--format lists 'auto_round' twice"},
#if AR_CUDA_BUILT  // one GPU tunes (GpuRun below); what it cannot do yet is refused before any work
    {"--device_map 0,1", 2, "--device_map 0,1: GPU indices; the CUDA backend tunes on one GPU for now (--device cuda:0)"},
    {"--device_map cuda:0,cuda:1", 2,
     "--device_map cuda:0,cuda:1: cuda:0 is not a CPU device; the CUDA backend tunes on one GPU for now"},
    {"--device_map cuda:0 --scheme FP8_STATIC", 1, "--device cuda:0: FP8_STATIC is not tuned on the CUDA backend yet"},
    {"--device 0 --format auto_round,gguf:q4_k_m", 1, "--device cuda:0: a GGUF output is not tuned on the CUDA backend yet"},
    {"--device cuda:0 --parallel_quantization 2", 1, "--device cuda:0: a data-parallel lane is not tuned on the CUDA"},
#else
    {"--device_map cuda:0", 2, "--device cuda:0: this build has the CPU backend only"},
    {"--device_map 0", 2, "--device 0: this build has the CPU backend only"},
    {"--device_map 0,1", 2, "--device_map 0,1: GPU indices; this build has the CPU backend only (a list of CPU devices"},
    {"--device_map cuda:0,cuda:1", 2, "--device_map cuda:0,cuda:1: cuda:0 is not a CPU device; this build has the CPU backend only"},
#endif
    {"--device_map cpu:0,cpu:1", 0, "--device_map cpu:0,cpu:1: data-parallel over these CPU devices (--parallel_quantization auto --devices cpu:0,cpu:1)"},
    {"--iter 3", 2, "unknown option --iter for quantize (did you mean --iters?)"},
    {"--nsample 3", 2, "(did you mean --nsamples?)"},
};

class AutoRoundFlags : public ::testing::TestWithParam<Row> {};

TEST_P(AutoRoundFlags, AcceptedWithNoteOrRefusedWithWhatIsSupported) {
  struct Model {  // written once per process, removed when it exits
    std::string dir = ar::test::temp_path("compat_model");
    Model() { ar::write_synthetic_model(dir, ar::tiny_llama_config(1), 3); }
    ~Model() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  static const Model model;
  const std::string& d = model.dir;
  const Row& r = GetParam();
  const std::string out = ar::test::temp_path("compat_out");
  const CliOut res = run("--model " + d + " --iters 0 --nsamples 2 --seqlen 16 --output_dir " + out + " " + r.flags);
  EXPECT_EQ(res.code, r.code) << r.flags << "\n" << res.out;
  EXPECT_NE(res.out.find(r.message), std::string::npos) << r.flags << "\n" << res.out;
  EXPECT_EQ(fs::exists(out), r.code == 0) << r.flags;
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Rows, AutoRoundFlags, ::testing::ValuesIn(kRows));

// --device cuda:0 on a plain tuning run: where the build has the CUDA backend it runs on the GPU, or is
// refused with the runtime's reason before anything is written when none is visible; elsewhere it is a
// usage error.
TEST(GpuRun, TunesOnTheGpuOrSaysWhyNotBeforeAnyWork) {
  const std::string model = ar::test::temp_path("gpu_model"), out = ar::test::temp_path("gpu_out");
  ar::write_synthetic_model(model, ar::tiny_llama_config(1), 3);
  const CliOut r = run("--model " + model + " --iters 2 --nsamples 2 --seqlen 16 --device cuda:0 --output_dir " + out);
  if (!AR_CUDA_BUILT) {
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--device cuda:0: this build has the CPU backend only"), std::string::npos) << r.out;
  } else if (r.code == 0) {  // a GPU is visible: the run tuned on it
    EXPECT_NE(r.out.find("tuning and block passes on cuda:0 ("), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(out));
  } else {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("error: cuda:0: no CUDA device visible ("), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out));
  }
  fs::remove_all(model);
  fs::remove_all(out);
}

TEST(CliTopLevel, VersionHelpAndTypos) {
  CliOut r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("autoround.cpp ", 0), 0u) << r.out;
  r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Without a subcommand, `autoround --model DIR ...` runs quantize"), std::string::npos);
  EXPECT_NE(r.out.find("--iters"), std::string::npos) << "top-level help shows the quantize options";
  r = run("evl --model x");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown subcommand 'evl' (did you mean 'eval'?)"), std::string::npos) << r.out;
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out.find("did you mean"), std::string::npos) << "no suggestion for a word far from every subcommand";
  r = run("eval --model x --text y --ctxx 8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown option --ctxx for eval (did you mean --ctx?)"), std::string::npos) << r.out;
}

TEST(CliTopLevel, HubNamesAreLookedUpInTheLocalCache) {
  const std::string home = ar::test::temp_path("hf_home");
  const std::string repo = home + "/hub/models--tiny-org--tiny.model";
  ar::write_synthetic_model(repo + "/snapshots/abc123", ar::tiny_llama_config(1), 3);
  fs::create_directories(repo + "/refs");
  { std::ofstream(repo + "/refs/main") << "abc123\n"; }
  { std::ofstream(home + "/t.txt") << std::string(2000, 'a'); }
  const std::string env = "HF_HOME=" + home + " HF_HUB_CACHE=";
  CliOut r = run("eval --model tiny-org/tiny.model --text " + home + "/t.txt --ctx 16", env);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("perplexity"), std::string::npos) << r.out;
  // A second snapshot without refs/main is ambiguous; a name not in the cache says how to get it.
  fs::remove(repo + "/refs/main");
  fs::create_directories(repo + "/snapshots/def456");
  r = run("eval --model tiny-org/tiny.model --text " + home + "/t.txt", env);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("2 snapshots in"), std::string::npos) << r.out;
  r = run("--model other-org/absent --iters 0", env);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--model other-org/absent: not a local directory and not in the Hugging Face cache (" + home +
                       "/hub/models--other-org--absent); downloading is not supported"),
            std::string::npos)
      << r.out;
  fs::remove_all(home);
}

}  // namespace
