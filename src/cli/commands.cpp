#include "cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/generate.h"
#include "eval/perplexity.h"
#include "io/atomic_file.h"
#include "io/output_guard.h"
#include "cli/autoround_compat.h"
#include "cli/inference.h"
#include "cli/launch_command.h"
#include "cli/model_path.h"
#include "cli/quantize_job.h"
#include "core/log.h"
#include "io/mapped_file.h"
#include "io/text_source.h"
#include "model/convert_llama2c.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/tokenizer/tokenizer.h"
#include "cli/option_checks.h"
#include "parallel/devices.h"
#include "pipeline/option_limits.h"
#include "pipeline/float_export.h"
#include "pipeline/gpu_tuner.h"
#include "pipeline/outputs.h"
#include "pipeline/quantize.h"
#include <sstream>

namespace ar::cli {

namespace {
DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "float32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "fp16" || s == "float16") return DType::F16;
  fail(ErrorKind::InvalidInput, "--dtype '" + s + "' is not supported (fp32, bf16, fp16)");
}
// --scheme and --recipe set defaults; explicit flags (given(name)) win.
std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// auto-round's weight schemes: bits, group size, the float family (none: int), FP8_BLOCK's block rows,
// and the activation bits the scheme quantizes to (16: weight-only).
struct SchemePreset {
  const char* name;
  int bits;
  int64_t group;
  std::optional<quant::FpFamily> fp;
  int64_t block_rows;
  int act_bits;
};
constexpr SchemePreset kSchemes[] = {
    {"W4A16", 4, 128, {}, 0, 16},       {"W2A16", 2, 128, {}, 0, 16},
    {"W3A16", 3, 128, {}, 0, 16},       {"W8A16", 8, 128, {}, 0, 16},
    {"W2A16G64", 2, 64, {}, 0, 16},     {"W2A16G32", 2, 32, {}, 0, 16},
    {"MXFP4", 4, 32, quant::FpFamily::Mx, 0, 4},  // MXFP4_RCEIL: rceil activations, floor weights
    {"MXFP4_RCEIL", 4, 32, quant::FpFamily::Mx, 0, 4},
    {"MXFP8", 8, 32, quant::FpFamily::Mx, 0, 8},  {"MXFP8_RCEIL", 8, 32, quant::FpFamily::Mx, 0, 8},
    {"NVFP4", 4, 16, quant::FpFamily::Nvfp4, 0, 4},
    {"FPW8A16", 8, 0, quant::FpFamily::Fp8, 0, 16},
    {"FP8_BLOCK", 8, 128, quant::FpFamily::Fp8, 128, 8},
    {"FP8_STATIC", 8, -1, quant::FpFamily::Fp8, 0, 8},
};

// --data_type as auto-round spells it (the bits it implies, 0: --bits decides).
std::optional<quant::FpFamily> parse_data_type(const std::string& v, int* implied_bits) {
  const std::string d = lower(v);
  *implied_bits = 0;
  if (d == "int") return std::nullopt;
  if (d == "mx_fp" || d == "mx_fp4" || d == "mx_fp8") {
    *implied_bits = d == "mx_fp" ? 0 : d.back() - '0';
    return quant::FpFamily::Mx;
  }
  if (d == "mx_fp_rceil") return quant::FpFamily::MxRceil;
  if (d == "nv_fp" || d == "nv_fp4") {
    *implied_bits = 4;
    return quant::FpFamily::Nvfp4;
  }
  if (d == "fp" || d == "fp8" || d == "fp8_e4m3" || d == "fp8_sym") {
    *implied_bits = 8;
    return quant::FpFamily::Fp8;
  }
  usage_error("--data_type " + v + " is not supported (int, mx_fp, mx_fp_rceil, nv_fp, fp)");
}

void apply_scheme_and_recipe(const std::string& scheme, const std::string& recipe,
                             const std::function<bool(const char*)>& given, QuantizeOptions& qo,
                             bool& disable_opt_rtn, const CompatFlags& compat) {
  const SchemePreset* sc = nullptr;
  if (!scheme.empty()) {
    for (const auto& k : kSchemes)
      if (upper(scheme) == k.name) sc = &k;  // w4a16 as auto-round accepts it
    if (!sc) {
      std::string names;
      for (const auto& k : kSchemes) names += (names.empty() ? "" : ", ") + std::string(k.name);
      usage_error("--scheme '" + scheme + "' is not supported (" + names + ")");
    }
    if (!given("--bits")) qo.fmt.bits = sc->bits;
    if (!given("--group_size")) qo.fmt.group_size = sc->group;
    qo.fmt.fp = sc->fp;
    qo.fmt.block_rows = sc->block_rows;
  }
  if (given("--data_type")) {
    int implied = 0;
    const auto fam = parse_data_type(compat.data_type, &implied);
    if (implied && given("--bits") && qo.fmt.bits != implied)
      usage_error("--data_type " + compat.data_type + " has " + std::to_string(implied) + " bits (--bits " +
                  std::to_string(qo.fmt.bits) + ")");
    if (implied) qo.fmt.bits = implied;
    if (fam != qo.fmt.fp) qo.fmt.block_rows = 0;
    qo.fmt.fp = fam;
    if (fam && !given("--group_size") && (!sc || sc->fp != fam))  // the family's own block, not W4A16's 128
      qo.fmt.group_size = fam == quant::FpFamily::Nvfp4 ? 16 : fam == quant::FpFamily::Fp8 ? -1 : 32;
  }
  const int act_bits = given("--act_bits") ? int(compat.act_bits) : sc ? sc->act_bits : 16;
  const bool fp8_static = sc && std::string(sc->name) == "FP8_STATIC" && qo.fmt.fp == quant::FpFamily::Fp8;
  if (act_bits == 8 && fp8_static) {
    qo.fmt.act_bits = 8;  // static per-tensor E4M3 activations: a scale per Linear input from calibration
  } else if (act_bits != 16) {
    const std::string what = given("--act_bits") ? "--act_bits " + std::to_string(act_bits)
                                                 : "--scheme " + std::string(sc->name) + " quantizes activations to " +
                                                       std::to_string(act_bits) + " bits, which";
    usage_error(what + " needs dynamic activation quantization (a runtime kernel), which is not built in yet; " +
                (sc && !given("--act_bits") ? "add --act_bits 16 for its weights with 16-bit activations"
                                            : "use --act_bits 16 (weight-only), or --scheme FP8_STATIC for static FP8 "
                                              "activations"));
  }
  if (recipe == "best") {
    if (!given("--iters")) qo.tune.iters = 1000;
    if (!given("--nsamples")) qo.calib.nsamples = 512;
  } else if (recipe == "light") {
    if (!given("--iters")) qo.tune.iters = 50;
    if (!given("--lr")) qo.tune.lr = 5e-3;
  } else if (recipe == "opt-rtn" || recipe == "rtn") {
    if (!given("--iters")) qo.tune.iters = 0;
    if (recipe == "rtn") {
      if (!given("--nsamples")) qo.calib.nsamples = 1;
      disable_opt_rtn = true;
    }
  } else if (recipe != "default") {
    usage_error("--recipe '" + recipe + "' is not supported (default, best, light, opt-rtn, rtn)");
  }
}

// --device / --device_map as auto-round spells them: cpu, auto, a device (cuda:0, 0) or a list (0,1).
// cpu and auto run on the CPU as they are; a list of CPU devices (cpu:0,cpu:1) is the data-parallel
// lane over them (as --parallel_quantization auto --devices, with a note); one GPU (cuda:N or N) tunes
// on it where the build has the CUDA backend (pipeline/gpu_tuner.h), and is refused elsewhere; a list
// of GPUs is refused with what to use instead. Returns the --devices value the list stands for ("" if
// none); *cuda_device gets the GPU's index.
std::string check_device_map(const std::string& v, int* cuda_device) {
  if (v == "auto" || v == "cpu") return "";
  auto all_digits = [](const std::string& t) { return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos; };
  const std::string one_gpu = cuda_built() ? "the CUDA backend tunes on one GPU for now (--device cuda:0)"
                                           : "this build has the CPU backend only";
  if (v.find(',') != std::string::npos) {
    std::stringstream ss(v);
    for (std::string part; std::getline(ss, part, ',');)
      if (all_digits(part))
        usage_error("--device_map " + v + ": GPU indices; " + one_gpu + " (a list of CPU devices, e.g. cpu:0,cpu:1, "
                    "runs data-parallel over them)");
    const auto list = as_usage([&] { return parallel::parse_device_list(v); });
    for (const auto& d : list)
      if (d.kind != DeviceKind::CPU) usage_error("--device_map " + v + ": " + d.str() + " is not a CPU device; " + one_gpu);
    return v;
  }
  const Device d = as_usage([&] { return Device::parse(all_digits(v) ? "cuda:" + v : v); });
  if (d.kind != DeviceKind::CPU) {
    if (!cuda_built()) usage_error("--device " + v + ": this build has the CPU backend only");
    *cuda_device = d.index;
  }
  return "";
}

// Every quantize option on its own and against the others, after scheme and recipe are applied.
void check_quantize_usage(const QuantizeOptions& qo) {
  as_usage([&] { validate_quantize_options(qo); });
  const int bits = qo.fmt.bits;
  if (qo.fmt.is_float() && bits != 4 && bits != 8)
    usage_error("--bits " + std::to_string(bits) + " is not a float weight width (4: E2M1, 8: E4M3)");
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    usage_error("--bits " + std::to_string(bits) + " is not supported (2, 3, 4, 8)");
  if (qo.fmt.is_float()) as_usage([&] { check_float_scheme(qo); });
  as_usage([&] { parse_formats(qo); });  // known, not repeated, writable with these bits
  if (!qo.calib.dataset.empty()) as_usage([&] { quant::parse_dataset_spec(qo.calib.dataset); });
  const auto devices = as_usage([&] { return parallel::parse_device_list(qo.devices); });
  const auto& par = qo.parallel;
  if (!devices.empty() && par.mode == parallel::ParallelSetting::Off)
    usage_error("--devices " + qo.devices + " is only used with --parallel_quantization auto or N >= 2");
  if (par.mode == parallel::ParallelSetting::Explicit && !devices.empty() && int(devices.size()) < par.world)
    usage_error("--parallel_quantization " + std::to_string(par.world) + " needs " + std::to_string(par.world) +
                " devices but --devices lists " + std::to_string(devices.size()));
}
}  // namespace

void register_convert(CLI::App& app, Registry& reg) {
  auto* sub = app.add_subcommand("convert", "Convert a llama2.c checkpoint + tokenizer into an HF Llama directory");
  auto o = std::make_shared<ConvertOptions>();
  auto dtype = std::make_shared<std::string>("fp32");
  sub->add_option("--llama2c", o->checkpoint, "llama2.c checkpoint (.bin)")->required();
  sub->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer (.bin)")->required();
  sub->add_option("--out", o->out_dir, "output directory")->required();
  sub->add_option("--dtype", *dtype, "tensor dtype: fp32 (default), bf16, fp16");
  sub->add_flag("--overwrite", o->overwrite, "replace an existing output directory");
  sub->parse_complete_callback([o, dtype] { o->dtype = as_usage([&] { return parse_dtype(*dtype); }); });
  reg.runners[sub] = [o] {
    convert_llama2c(*o);
    log_result("wrote " + o->out_dir);
  };
}

void register_generate(CLI::App& app, Registry& reg) {
  auto* sub = app.add_subcommand("generate", "Greedy text generation with an HF model directory or a GGUF file");
  struct Opt { std::string model, prompt; int64_t n = 256; int threads = 0; };
  auto o = std::make_shared<Opt>();
  sub->add_option("--model", o->model, "model directory or GGUF file")->required();
  sub->add_option("--prompt", o->prompt, "prompt text (default empty: start from BOS)");
  sub->add_option("-n,--n_tokens", o->n, "tokens to generate after the prompt");
  sub->add_option("--threads", o->threads, "CPU threads (default: all cores; at most 1024)");
  sub->parse_complete_callback([o] {
    require_limit(limits::kTokens, o->n);
    require_limit(limits::kThreads, o->threads);
  });
  reg.runners[sub] = [o] {
    o->model = resolve_model_dir(o->model);
    auto model = open_model(o->model);
    auto tok = load_tokenizer(*model);
    Context ctx(Device{}, o->threads);
    Transformer tf(*model, ctx, /*resident=*/true);
    std::vector<int32_t> ids = tok->encode(o->prompt);
    if (ids.empty()) {
      if (tok->bos() < 0) fail(ErrorKind::InvalidInput, "empty prompt and the tokenizer has no BOS token");
      ids.push_back(tok->bos());
    }
    // The prompt and one new token must fit, or the "generation" would be empty with exit 0.
    require_context(*model, int64_t(ids.size()) + (o->n > 0 ? 1 : 0), "generate");
    std::string shown = tok->decode(ids);
    // The prompt is printed once the prompt pass succeeded, so a model refused there (non-finite
    // activations) prints only its error line.
    bool started = false;
    auto start = [&] {
      if (!started) std::fputs(shown.c_str(), stdout);
      started = true;
    };
    int64_t made = 0;
    generate_greedy(tf, ids, o->n, [&](int32_t, int32_t next) {  // print what the new token adds
      start();
      ++made;
      ids.push_back(next);
      std::string text = tok->decode(ids);
      if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0)
        std::fputs(text.c_str() + shown.size(), stdout);
      shown = text;
      std::fflush(stdout);
    });
    start();
    std::fputs("\n", stdout);
    std::fflush(stdout);  // the text first, then the note on stderr
    const int64_t n_ctx = tf.config().context_tokens();
    if (made < o->n && int64_t(ids.size()) >= n_ctx)  // not EOS: say why the text is shorter than asked
      log_result("generate: stopped at the model's context length (" + std::to_string(n_ctx) + " tokens) after " +
                 std::to_string(made) + " of " + std::to_string(o->n) + " new tokens");
  };
}

void register_eval(CLI::App& app, Registry& reg) {
  auto* sub = app.add_subcommand("eval", "Perplexity of a model over a text file");
  struct Opt { std::string model, text, ref, field = "text"; int64_t ctx = 0, batch = 4; bool json = false; int threads = 0; };
  auto o = std::make_shared<Opt>();
  sub->add_option("--model", o->model, "model directory or GGUF file")->required();
  sub->add_option("--text", o->text, "text: plain file, JSONL, a directory of them, or - (standard input)")->required();
  sub->add_option("--text-field", o->field, "JSONL field holding the text (default: text)");
  sub->add_option("--ref-model", o->ref, "reference (unquantized) model, directory or GGUF file: adds KL divergence, top-1 agreement, delta ppl");
  sub->add_option("--ctx", o->ctx, "window length in tokens (default min(512, max_position_embeddings))");
  sub->add_option("--batch", o->batch, "windows per forward pass");
  sub->add_option("--threads", o->threads, "CPU threads (default: all cores; at most 1024)");
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->parse_complete_callback([o] {
    require_limit(limits::kCtx, o->ctx);
    if (o->ctx == 1) usage_error("--ctx 1 is too short (0 for the default, or at least 2)");
    require_limit(limits::kEvalBatch, o->batch);
    require_limit(limits::kThreads, o->threads);
    if (o->field.empty()) usage_error("--text-field must name a JSONL field");
  });
  reg.runners[sub] = [o] {
    auto read_text = [&] {
      TextSourceOptions src;
      src.option = "--text";
      src.allow_stdin = true;  // read once, start to end: a pipe works as well as a file
      return read_all_text(o->text, o->field, src);
    };
    const EvalRequest req{o->model, o->ref, o->ctx, o->batch, o->threads, !o->json && isatty(STDERR_FILENO)};
    const auto figures = evaluate_text(req, read_text);  // the models are opened before the text is read
    std::printf("%s\n", o->json ? figures.dump().c_str() : eval_summary(figures).c_str());
  };
}

void register_quantize(CLI::App& app, Registry& reg) {
  auto* sub = app.add_subcommand("quantize", "Quantize an HF model with SignRound (AutoRound's flags; also `autoround --model ...`)");
  struct Opt {
    QuantizeOptions q;
    bool asym = false, not_use_best = false, disable_quanted_input = false, disable_minmax = false;
    bool disable_opt_rtn = false, quant_lm_head = false, disable_amp = false;
    std::string fp_layers, layer_config, device = "cpu", recipe = "default", scheme, parallel = "off", amp;
    CompatFlags compat;
    JobFlags job;
  };
  auto o = std::make_shared<Opt>();
  auto& q = o->q;
  sub->add_option("--model,--model_name", q.model_dir, "HF model directory")->required();
  sub->add_option("--scheme", o->scheme, "W4A16 (default), W2A16, W3A16, W8A16, W2A16G64, W2A16G32; float weights: "
                                         "MXFP4, MXFP8, NVFP4, FPW8A16, FP8_BLOCK, FP8_STATIC (W8A8, static "
                                         "activation scales; the others that quantize activations need --act_bits 16)");
  sub->add_option("--recipe", o->recipe, "default | best | light | opt-rtn | rtn (auto-round's console scripts)");
  sub->add_option("--output_dir", q.output_dir, "output directory (default ./tmp_autoround)");
  sub->add_option("--bits", q.fmt.bits, "weight bits: 2, 3, 4, 8");
  sub->add_option("--group_size", q.fmt.group_size, "group size (-1: per channel)");
  sub->add_flag("--asym", o->asym, "asymmetric quantization (default: full-range symmetric)");
  sub->add_option("--iters", q.tune.iters, "SignRound iterations (0: RTN)");
  sub->add_option("--nsamples", q.calib.nsamples, "calibration samples");
  sub->add_option("--seqlen", q.calib.seqlen, "tokens per calibration sample");
  sub->add_option("--batch_size,--bs", q.tune.batch_size, "samples per micro-batch");
  sub->add_option("--gradient_accumulate_steps", q.tune.gradient_accumulate_steps, "micro-batches per step");
  sub->add_option("--lr", q.tune.lr, "learning rate of V (default 1/iters)");
  sub->add_option("--minmax_lr", q.tune.minmax_lr, "learning rate of alpha/beta (default lr)");
  sub->add_option("--seed", q.tune.seed, "seed for sampling")
      ->check(CLI::Validator([](std::string& v) { return check_seed_text(v); }, "SEED", "0 to 2^64-1"));
  sub->add_option("--dataset", q.calib.dataset, "PATH[:concat=true][:num=N][:field=F],... (default: built-in corpus)");
  sub->add_option("--format", q.format,
                  "auto_round (default), auto_gptq, auto_awq, llm_compressor (float schemes: compressed-tensors) "
                  "or fake; several comma-separated (auto_round,auto_gptq) "
                  "write one subdirectory each from one tuning; or one gguf:<preset> (q2_k, q2_k_s, q2_k_mixed, "
                  "q3_k_s/m/l, q4_0, q4_1, q4_k_s/m, q5_0, q5_1, q5_k_s/m, q6_k, q8_0, bf16, f16): a llama.cpp GGUF "
                  "file (with fake alone: the file's weights dequantized; with int formats: each block tuned once "
                  "for each)");
  sub->add_option("--fp_layers,--ignore_layers", o->fp_layers, "comma-separated substrings of layers kept in 16 bit");
  sub->add_option("--layer_config", o->layer_config,
                  "per-layer schemes, AutoRound's syntax: '{\"mlp.down_proj\": {\"bits\": 8}, "
                  "\"layers.0.self_attn\": \"BF16\"}' or {mlp.down_proj:{bits:8}}; keys are Linear names "
                  "or patterns (substrings, or regexes with .* ^ $ | ( [ ? +); keys bits (2 3 4 8, 16 keeps "
                  "the layer), group_size, sym, data_type, scheme (W2A16 W3A16 W4A16 W8A16 BF16)");
  sub->add_flag("--not_use_best_mse", o->not_use_best, "keep the last iterate instead of the best");
  sub->add_flag("--disable_quanted_input", o->disable_quanted_input, "tune on FP-chain inputs");
  sub->add_flag("--disable_minmax_tuning", o->disable_minmax, "tune V only");
  sub->add_flag("--disable_opt_rtn", o->disable_opt_rtn, "plain RTN for --iters 0 (default: imatrix-weighted optimized RTN)");
  sub->add_flag("--quant_lm_head", o->quant_lm_head, "quantize lm_head too (not when tied to the embeddings)");
  sub->add_option("--device,--device_map", o->device, "cpu (default), auto, a list of CPU devices (cpu:0,cpu:1: the data-parallel lane over them), or one GPU (cuda:0: SignRound on it, where the build has the CUDA backend)");
  sub->add_option("--threads", q.threads, "CPU threads (default: all cores)");
  sub->add_option("--parallel_quantization", o->parallel,
                  "off (default) | auto | N: tune each block data-parallel on N devices (one replica each, "
                  "disjoint calibration shards, one gradient exchange per iteration)");
  sub->add_option("--devices", q.devices, "devices of the parallel lane, e.g. cpu:0,cpu:1 (CPU devices split this "
                                          "host's cores, NUMA-aware; default: one per NUMA node)");
  sub->add_option("--deterministic", q.tune.deterministic,
                  "true (default) | false: per-sample gradient leaves summed by a fixed tree, so every world "
                  "writes identical files; false batches micro-batches (faster, world-dependent rounding)")
      ->expected(0, 1)
      ->default_str("true");  // a bare --deterministic means true, as in auto-round
  sub->add_option("--amp", o->amp,
                  "true | false: bf16 GEMM operands with fp32 accumulation, bf16 calibration activations (default: "
                  "on where the CPU has AVX512_BF16 or AMX-BF16; the choice is logged)");
  sub->add_flag("--disable_amp", o->disable_amp, "auto-round's spelling of --amp false");
  sub->add_flag("--verbose", q.verbose, "per-block phase timings (mirrors, warm-up, forward, backward, exchange, step)");
  sub->add_option("--report", q.report_path, "write a JSON report (per-block losses, timings, memory)");
  sub->add_flag("--overwrite", q.overwrite, "replace an existing output directory");
  sub->add_flag("--resume", q.resume, "keep state in OUTPUT_DIR.partial after every block; rerun the same command to "
                                      "continue after a crash (output byte-identical to an uninterrupted run)");
  sub->add_option("--master_addr", o->job.master_addr,
                  "multi-process job: rank 0's rendezvous address (default MASTER_ADDR, or the first Slurm node)");
  sub->add_option("--master_port", o->job.master_port, "multi-process job: rendezvous port (default MASTER_PORT or 29500)")
      ->check(CLI::Range(1, 65535));
  sub->add_option("--timeout", o->job.timeout_s,
                  "multi-process job: seconds to reach the rendezvous and to declare a silent rank lost (default 60)")
      ->check(CLI::Range(1.0, 86400.0));
  sub->add_option("--advertise_addr", o->job.advertise_addr,
                  "multi-process job: this host's address for the other ranks (default: GLOO_SOCKET_IFNAME's, or the "
                  "route to the rendezvous)");
  sub->add_option("--job_token_file", o->job.job_token_file,
                  "multi-process job: a file holding the job's secret, the same on every rank (default: AR_JOB_TOKEN; "
                  "none: an unauthenticated rendezvous on MASTER_ADDR only)");
  register_compat_flags(sub, o->compat);
  sub->parse_complete_callback([o, sub] {
    auto given = [&](const char* name) { return sub->get_option(name)->count() > 0; };
    for (const auto& note : apply_compat_flags(o->compat, given, o->asym)) log_info(note);
    apply_scheme_and_recipe(o->scheme, o->recipe, given, o->q, o->disable_opt_rtn, o->compat);
    auto& qo = o->q;
    if (qo.output_dir.empty()) qo.output_dir = "./tmp_autoround";
    qo.fmt.sym = !o->asym;
    qo.tune.use_best_mse = !o->not_use_best;
    qo.tune.enable_minmax_tuning = !o->disable_minmax;
    qo.quanted_input = !o->disable_quanted_input;
    qo.disable_opt_rtn = o->disable_opt_rtn;
    qo.quant_lm_head = o->quant_lm_head;
    qo.calib.seed = qo.tune.seed;
    qo.calib.seqlen_given = given("--seqlen");
    qo.group_size_given = given("--group_size");
    if (o->amp == "true" || o->amp == "1") qo.amp = true;
    else if (o->amp == "false" || o->amp == "0") qo.amp = false;
    else if (!o->amp.empty()) usage_error("--amp '" + o->amp + "': expected true or false");
    if (o->disable_amp) {
      if (qo.amp == true) usage_error("--disable_amp contradicts --amp true");
      qo.amp = false;
    }
    qo.parallel = as_usage([&] { return parallel::ParallelSetting::parse(o->parallel); });
    if (const std::string list = check_device_map(o->device, &qo.cuda_device); !list.empty()) {
      if (!qo.devices.empty() && qo.devices != list)
        usage_error("--device_map " + list + " contradicts --devices " + qo.devices);
      qo.devices = list;
      if (qo.parallel.mode == parallel::ParallelSetting::Off && !given("--parallel_quantization"))
        qo.parallel = parallel::ParallelSetting::parse("auto");
      log_info("--device_map " + list + ": data-parallel over these CPU devices (--parallel_quantization " +
               qo.parallel.str() + " --devices " + list + ")");
    }
    std::stringstream ss(o->fp_layers);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) qo.fp_layers.push_back(item);
    qo.layer_config = as_usage([&] { return LayerConfig::parse(o->layer_config); });
    check_quantize_usage(qo);
  });
  reg.runners[sub] = [o] {
    auto& qo = o->q;
    qo.model_dir = resolve_model_dir(qo.model_dir);
    run_quantize(qo, o->job);
  };
}

void register_logits(CLI::App& app, Registry& reg) {
  auto* sub = app.add_subcommand("logits", "Write the model's fp32 logits for a text (raw little-endian [tokens, vocab]) "
                                           "and its token ids (for comparisons with other runtimes)");
  struct Opt { std::string model, text, out; };
  auto o = std::make_shared<Opt>();
  sub->add_option("--model", o->model, "model directory or GGUF file")->required();
  sub->add_option("--text", o->text, "text (encoded with the model's tokenizer and special tokens)")->required();
  sub->add_option("--out", o->out, "output file; token ids go to OUT.ids (one per line)")->required();
  reg.runners[sub] = [o] {
    o->model = resolve_model_dir(o->model);
    // Raw logits carry no mark of ours, so an existing file is never replaced.
    check_output_file(o->out, "--out", false, {o->model}, nullptr);
    check_output_file(o->out + ".ids", "--out", false, {o->model}, nullptr);
    const LogitsResult r = text_logits(o->model, o->text);
    write_file_atomic(o->out, std::string(reinterpret_cast<const char*>(r.logits.data()), r.logits.size() * sizeof(float)));
    std::string lines;
    for (int32_t id : r.ids) lines += std::to_string(id) + "\n";
    write_file_atomic(o->out + ".ids", lines);
    log_result("wrote " + std::to_string(r.ids.size()) + " x " + std::to_string(r.vocab) + " logits to " + o->out);
  };
}

void register_launch(CLI::App& app, Registry& reg) {
  add_launch_command(app, [&reg](CLI::App* sub, std::function<int()> run) { reg.exit_code_runners[sub] = run; });
}

int run_selected(CLI::App& app, const Registry& reg) {
  for (auto* sub : app.get_subcommands()) {
    if (auto it = reg.runners.find(sub); it != reg.runners.end()) return it->second(), 0;
    if (auto it = reg.exit_code_runners.find(sub); it != reg.exit_code_runners.end()) return it->second();
  }
  fail(ErrorKind::InvalidInput, "no subcommand given");
}

}  // namespace ar::cli
