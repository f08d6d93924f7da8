#include "cli/autoround_compat.h"

#include <algorithm>
#include <cctype>

#include "cli/option_checks.h"

namespace ar::cli {

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

void register_compat_flags(CLI::App* sub, CompatFlags& f) {
  const char* g = "auto-round compatibility";
  sub->add_flag("--sym", f.sym, "symmetric quantization (the default)")->group(g);
  sub->add_option("--data_type", f.data_type, "int (default), mx_fp, mx_fp_rceil, nv_fp or fp (FP8 E4M3): the weight data type")->group(g);
  sub->add_option("--nblocks", f.nblocks, "blocks tuned together: 1")->group(g);
  sub->add_option("--act_bits", f.act_bits, "16: weight-only; 8 with --scheme FP8_STATIC (static FP8 activations)")->group(g);
  sub->add_flag("--low_gpu_mem_usage", f.low_gpu_mem_usage, "accepted; one block is resident anyway")->group(g);
  sub->add_flag("--disable_eval", f.disable_eval, "accepted; no evaluation runs after quantizing")->group(g);
  sub->add_flag("--enable_torch_compile", f.torch_compile, "accepted; native kernels")->group(g);
  sub->add_option("--model_dtype", f.model_dtype, "accepted; weights are read as stored, computed in fp32 (GEMM operands in bf16 under --amp)")->group(g);
  sub->add_option("--scale_dtype", f.scale_dtype, "fp16 (scales are stored in float16)")->group(g);
  sub->add_option("--tasks", f.tasks, "not supported: use `autoround eval`")->group(g);
}

std::vector<std::string> apply_compat_flags(const CompatFlags& f, const std::function<bool(const char*)>& given,
                                            bool asym) {
  std::vector<std::string> notes;
  if (f.sym && asym) usage_error("--sym and --asym contradict each other");
  if (given("--nblocks") && f.nblocks != 1)
    usage_error("--nblocks " + std::to_string(f.nblocks) + " is not supported (1: blocks are tuned one at a time)");
  if (given("--tasks"))
    usage_error("--tasks: evaluation tasks are not run here; measure the output with `autoround eval --model OUT "
                "--text FILE --ref-model MODEL`");
  if (given("--scale_dtype") && lower(f.scale_dtype) != "fp16" && lower(f.scale_dtype) != "float16")
    usage_error("--scale_dtype " + f.scale_dtype + " is not supported (fp16: scales are stored in float16)");
  static const char* kDtypes[] = {"auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"};
  if (given("--model_dtype") &&
      std::none_of(std::begin(kDtypes), std::end(kDtypes), [&](const char* d) { return lower(f.model_dtype) == d; }))
    usage_error("--model_dtype " + f.model_dtype + " is not supported (auto, float32, bfloat16, float16)");
  auto note = [&](const char* flag, const std::string& why) { notes.push_back(std::string(flag) + ": no effect here (" + why + ")"); };
  if (f.low_gpu_mem_usage) note("--low_gpu_mem_usage", "the model is memory-mapped and one block is resident at a time");
  if (f.disable_eval) note("--disable_eval", "no evaluation runs after quantizing; use `autoround eval`");
  if (f.torch_compile) note("--enable_torch_compile", "native kernels, nothing to compile");
  if (given("--model_dtype")) note("--model_dtype", "weights are read in their stored dtype and computed in fp32 (GEMM operands in bf16 under --amp)");
  return notes;
}

std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace ar::cli
