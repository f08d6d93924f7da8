#include "pipeline/run_steps.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/printable.h"
#include "core/hash.h"
#include "core/log.h"
#include "export/shard_writer.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/mapped_file.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/linear_specs.h"
#include "model/loader.h"
#include "model/moe_names.h"
#include "model/rope_table.h"
#include "model/tokenizer/tokenizer.h"
#include "parallel/plan.h"
#include "pipeline/block_passes.h"
#include "pipeline/export_format.h"
#include "pipeline/float_export.h"
#include "pipeline/lane_planner.h"
#include "pipeline/outputs.h"
#include "pipeline/option_limits.h"
#include "pipeline/progress.h"
#include "pipeline/report.h"
#include "pipeline/resume_state.h"
#include "pipeline/run_estimate.h"
#include "pipeline/run_summary.h"
#include "quant/qdq_fp.h"
#include "quant/tune_linear.h"

namespace ar {

namespace steps {
using Clock = std::chrono::steady_clock;

// NaN/Inf stop the run with the block and tensor named (weights as loaded, activations per block).
void check_finite(const Tensor& t, const std::string& what) {
  const bool bf16 = t.dtype() == DType::BF16;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(bf16 ? bf16_to_f32(t.data<uint16_t>()[i]) : t.f32()[i]))
      fail(ErrorKind::InvalidInput, what + ": non-finite value at element " + std::to_string(i));
}

// The calibration activations' embeddings, sample by sample (x is fp32 or bf16).
void embed(Context& ctx, const Tensor& emb, const int32_t* ids, Tensor& x, int64_t n, int64_t T, int64_t C, float scale) {
  if (x.dtype() == DType::F32) return cpu::embedding_fwd(ctx, emb.f32(), ids, x.f32(), n * T, C, scale);
  Tensor row = Tensor::empty({T, C}, DType::F32, ctx);
  for (int64_t s = 0; s < n; ++s) {
    cpu::embedding_fwd(ctx, emb.f32(), ids + s * T, row.f32(), T, C, scale);
    cpu::fp32_to_bf16(ctx, row.f32(), x.data<uint16_t>() + s * T * C, T * C);
  }
}

Tensor as_f32(const Tensor& t, Context& ctx) { return t.dtype() == DType::F32 ? t : t.to(DType::F32, ctx); }

// The output's rules (io/output_guard.h): inputs are the model and the --dataset files; the report
// path is checked too (an existing one is replaced only with --overwrite and only if it is ours).
OutputSpec output_spec(const QuantizeOptions& opt, std::string* report_path) {
  OutputSpec spec;
  spec.path = opt.output_dir;
  spec.overwrite = opt.overwrite;
  spec.resumable = opt.resume;
  spec.inputs = {opt.model_dir};
  if (!opt.calib.dataset.empty())
    for (const auto& src : quant::parse_dataset_spec(opt.calib.dataset)) spec.inputs.push_back(src.path);
  if (!opt.report_path.empty())
    *report_path = check_output_file(opt.report_path, "--report", opt.overwrite, spec.inputs, is_report_file);
  return spec;
}

// Every option that determines the output, and the calibration as a checksum of its tokens; the model
// enters by content (job_identity.h: run_identity), so a resume works from any current directory.
nlohmann::ordered_json run_fingerprint(const QuantizeOptions& opt, const quant::CalibData& calib, bool lm_head_q,
                                       int processes) {
  const uint64_t tokens = hash64(calib.ids.data(), calib.ids.size() * sizeof(calib.ids[0]));
  nlohmann::ordered_json f = {{"format", opt.format}, {"bits", opt.fmt.bits},
          {"group_size", opt.fmt.group_size}, {"sym", opt.fmt.sym}, {"iters", opt.tune.iters}, {"lr", opt.tune.lr},
          {"minmax_lr", opt.tune.minmax_lr}, {"batch_size", opt.tune.batch_size},
          {"gas", opt.tune.gradient_accumulate_steps}, {"minmax", opt.tune.enable_minmax_tuning},
          {"best", opt.tune.use_best_mse}, {"seed", opt.tune.seed},
          {"calibration", {{"n", calib.n}, {"seqlen", calib.seqlen}, {"tokens_hash", hex64(tokens)}}},
          {"quanted_input", opt.quanted_input}, {"opt_rtn", !opt.disable_opt_rtn}, {"fp_layers", opt.fp_layers},
          {"quant_lm_head", lm_head_q}, {"deterministic", opt.tune.deterministic}, {"amp", opt.tune.amp},
          // The tuning's device: a GPU's GEMMs sum in another order (and run amp unless --amp false).
          {"tuned_on", opt.cuda_device < 0 ? std::string("cpu") : std::string(opt.amp.value_or(true) ? "cuda amp" : "cuda")},
          // Without --deterministic the bits depend on the world, so a resume must keep it.
          {"parallel", opt.tune.deterministic ? "any"
                                              : opt.parallel.str() + "@" + opt.devices +
                                                    (processes > 1 ? " x" + std::to_string(processes) + " processes" : "")}};
  if (opt.fmt.is_float())  // int runs keep the fingerprint they always had
    f["weights"] = float_scheme_name(opt.fmt);
  if (opt.fmt.act_static()) f["activations"] = "fp8 static";
  if (!opt.layer_config.empty()) f["layer_config"] = opt.layer_config.canonical();
  return f;
}

// What a resume state's writer may hold: a model tensor with the model's shape, or the packed tensors
// (qweight, qzeros, scales, g_idx) of one of the model's Linears.
std::function<std::string(const std::string&, const std::vector<int64_t>&)> resume_tensor_check(const HfModel& m) {
  return [&m](const std::string& name, const std::vector<int64_t>& shape) -> std::string {
    if (const StTensorInfo* info = m.info(name))
      return info->shape == shape ? "" : "shape " + shape_str(shape) + " differs from the model's " + shape_str(info->shape);
    for (const char* suffix : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale",
                               ".weight_global_scale", ".input_scale"}) {  // int packings, then the float schemes
      const std::string sfx = suffix;
      if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0)
        return m.has(name.substr(0, name.size() - sfx.size()) + ".weight") ? "" : "packs no Linear of the model";
    }
    return "not a tensor of the model";
  };
}


// A note for the log and the report.
void note(QuantizeReport& rep, const std::string& s) {
  log_info(s);
  rep.notes.push_back(s);
}

namespace {
// The full names of the model's Linears (lm_head first) and of its MoE routers.
struct LinearNames {
  std::vector<std::string> linears{"lm_head"}, routers;
  explicit LinearNames(const ModelConfig& cfg) {
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const std::string prefix = HfModel::layer_prefix(l);
      for (const auto& s : block_linear_specs(cfg, l)) linears.push_back(prefix + s.name);
      if (cfg.block_dims(l).is_moe())
        for (const char* r : {"mlp.gate", "block_sparse_moe.gate", "mlp.shared_expert_gate"}) routers.push_back(prefix + r);
    }
  }
};
constexpr const char* kRoutersStay = "a MoE router and shared_expert_gate stay in 16 bit, as AutoRound and vLLM keep them";
}  // namespace

void check_fp_layers(const QuantizeOptions& opt, const ModelConfig& cfg, QuantizeReport& rep) {
  if (opt.fp_layers.empty()) return;
  const LinearNames all(cfg);
  auto in_any = [](const std::vector<std::string>& names, const std::string& f) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.find(f) != std::string::npos; });
  };
  for (const std::string& f : opt.fp_layers) {
    if (in_any(all.linears, f)) continue;
    std::string msg = "--fp_layers '";
    msg += printable(f);
    msg += "' is in no Linear's name of this model (";
    if (in_any(all.routers, f)) {
      msg += kRoutersStay;
    } else {
      msg += "names read like ";
      msg += all.linears.back();
      msg += "; ignored";
    }
    msg += ")";
    note(rep, msg);
  }
}

void read_user_names(QuantizeOptions& opt, const NameMap& names) {
  if (!names.multimodal()) return;
  for (std::string& f : opt.fp_layers) f = names.from_user(f);
  opt.layer_config.rename_keys([&names](const std::string& key) { return names.from_user(key); });
}

void bind_layer_config(QuantizeOptions& opt, const ModelConfig& cfg, QuantizeReport& rep) {
  LayerConfig& lc = opt.layer_config;
  if (lc.empty()) return;
  const LinearNames all(cfg);
  const std::vector<std::string>& names = all.linears;
  const std::vector<std::string>& routers = all.routers;
  lc.bind(names);
  const std::vector<std::string> formats = parse_formats(opt);
  auto listed = [&](const char* f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
  bool own = false, asym_in_sym = false;
  for (size_t i = 0; i < lc.entries().size(); ++i) {
    const LayerConfigEntry& e = lc.entries()[i];
    if (std::any_of(names.begin(), names.end(), [&](const std::string& n) { return lc.matches(i, n); })) {
      own = own || !e.keeps_fp();
      asym_in_sym = asym_in_sym || (!e.keeps_fp() && opt.fmt.sym && !e.format(opt.fmt).sym);
      continue;
    }
    const bool router =
        std::any_of(routers.begin(), routers.end(), [&](const std::string& n) { return lc.matches(i, n); });
    note(rep, "--layer_config '" + printable(e.key) + "' matches no quantizable Linear of this model" +
                  (router ? std::string(": ") + kRoutersStay : std::string("; ignored")));
  }
  // What the loaders measured here do with it (docs/quantization.md, Layer rules).
  if (own && listed("auto_gptq"))
    note(rep, "--format auto_gptq with per-layer formats: gptqmodel and vLLM read its `dynamic` overrides; "
              "transformers' GPTQ loader (optimum) builds every Linear at --bits and cannot load it (auto_round can)");
  if (asym_in_sym && listed("auto_round"))
    note(rep, "--format auto_round with asymmetric Linears in a symmetric file (packing auto_round:auto_gptq, "
              "as AutoRound writes it): auto-round's CPU backends run only symmetric Linears in this packing (its "
              "CUDA exllamav2 backends list asymmetric ones)");
  // AutoRound: an entry named lm_head quantizes it (as --quant_lm_head).
  if (const LayerConfigEntry* e = lc.exact_match("lm_head"); e && !e->keeps_fp() && !opt.quant_lm_head) {
    opt.quant_lm_head = true;
    note(rep, "--layer_config names lm_head: quantizing it (as --quant_lm_head)");
  }
}

// The scheme's default group size, lowered where loaders need whole groups (run_summary.h).
void adapt_group_size(QuantizeOptions& opt, const ModelConfig& cfg, QuantizeReport& rep) {
  const int64_t g = loadable_group_size(cfg, opt), was = opt.fmt.group_size;
  if (g == was) return;
  note(rep, "group_size " + std::to_string(was) + " -> " + std::to_string(g) +
                " for this model: some Linears' in_features are not a multiple of " + std::to_string(was) +
                " and loaders need whole groups; --group_size " + std::to_string(was) +
                " keeps it and leaves those Linears in 16 bit");
  opt.fmt.group_size = g;
}

// Whether lm_head is tuned and packed: only with --quant_lm_head, under AutoRound's rules and the
// loaders' (decided before anything is written; a skip is a note, auto_awq a refusal).
bool decide_lm_head(const QuantizeOptions& opt, const HfModel& model, QuantizeReport& rep) {
  if (!opt.quant_lm_head) return false;
  const ModelConfig& cfg = model.config();
  const std::vector<std::string> formats = parse_formats(opt);
  if (std::find(formats.begin(), formats.end(), "auto_awq") != formats.end())
    fail(ErrorKind::InvalidInput, "--quant_lm_head cannot be exported as auto_awq (AWQ keeps lm_head in 16 bit)");
  const std::string why = cfg.tie_word_embeddings || !model.has("lm_head.weight")
                              ? "tied to the embeddings; AutoRound never quantizes a tied lm_head"
                              : kept_fp_reason("lm_head", cfg.vocab_size, cfg.hidden_size, LayerRules::of(opt));
  if (why.empty()) return true;
  note(rep, "--quant_lm_head: lm_head kept in 16 bit (" + why + ")");
  return false;
}

// lm_head tuned like a block (quant/tune_linear.h): input the final-normed quantized chain, target
// the FP lm_head on the final-normed FP chain; packed into every output.
void tune_lm_head(Context& ctx, const HfModel& model, const QuantizeOptions& opt, const Tensor& x_fp, const Tensor& x_q,
                  int64_t T, const std::vector<uint8_t>& loss_mask, OutputSet& outputs, QuantizeReport& rep) {
  const auto t0 = Clock::now();
  const ModelConfig& cfg = model.config();
  const int64_t n = x_fp.dim(0), C = cfg.hidden_size;
  Tensor norm = model.load_final_norm(ctx), head = model.load_lm_head(ctx);
  const Tensor chain = as_f32((opt.quanted_input && x_q.defined()) ? x_q : x_fp, ctx), fp = as_f32(x_fp, ctx);
  Tensor h_in = Tensor::empty({n, T, C}, DType::F32, ctx), h_fp = Tensor::empty({n, T, C}, DType::F32, ctx);
  Tensor rstd = Tensor::empty({n * T}, DType::F32, ctx);
  cpu::rmsnorm_fwd(ctx, chain.f32(), norm.f32(), h_in.f32(), rstd.f32(), n * T, C, cfg.rms_norm_eps);
  cpu::rmsnorm_fwd(ctx, fp.f32(), norm.f32(), h_fp.f32(), rstd.f32(), n * T, C, cfg.rms_norm_eps);
  float amax = 0;  // FP8_STATIC: its input's maximum on the chain it is tuned on (AutoRound's q or FP inputs)
  if (opt.fmt.act_static())
    for (int64_t i = 0; i < h_in.numel(); ++i) amax = std::max(amax, std::fabs(h_in.f32()[i]));
  const quant::QuantFormat fmt = layer_choice("lm_head", cfg.vocab_size, cfg.hidden_size, LayerRules::of(opt)).fmt;
  quant::BlockTuneResult tr =
      quant::signround_tune_linear(ctx, "lm_head", head, fmt, h_in, h_fp, T, loss_mask, opt.tune, amax);
  outputs.add_linear(ctx, "lm_head", tr.layers[0], /*lm_head=*/true);
  rep.lm_head_quantized = true;
  rep.lm_head_loss_first = tr.loss_first;
  rep.lm_head_loss_best = tr.loss_best;
  rep.lm_head_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  char line[160];
  std::snprintf(line, sizeof line, "lm_head: loss %.6g -> %.6g at iter %d, %.1f s", tr.loss_first, tr.loss_best,
                tr.best_iter, rep.lm_head_seconds);
  log_info(line);
}

// AutoRound's layer rules and the loaders', decided once per block: the Linears to quantize (their
// short names, e.g. mlp.down_proj) and their element count; br lists both kinds with the reasons.
quant::LayerFormats plan_block_layers(BlockWeights& w, const std::string& prefix, const LayerRules& rules,
                                      BlockReport& br, int64_t* tuned_elems) {
  quant::LayerFormats selected;
  *tuned_elems = 0;
  for (auto& [nm, t] : quant::block_linears(w)) {
    const std::string full = prefix + nm;
    const LayerChoice c = layer_choice(full, t->dim(0), t->dim(1), rules);
    if (!c.kept.empty()) {
      br.kept_fp.push_back(full + " (" + c.kept + ")");
      continue;
    }
    br.quantized.push_back(full);
    if (c.entry) br.own_formats[full] = format_name(c.fmt);
    selected.emplace(nm, c.fmt);
    *tuned_elems += t->numel();
  }
  // A MoE router and shared_expert_gate stay in 16 bit, as AutoRound keeps them (and lists them so).
  for (const BlockTensor& t : w.tensors)
    if (t.role == TensorRole::Kept) br.kept_fp.push_back(prefix + t.module() + " (" + t.why + ")");
  return selected;
}

void record_tuning(const quant::BlockTuneResult& tr, BlockReport& br) {
  const auto& p = tr.phases;
  for (const auto& [k, v] : {std::pair{"tune_qdq", p.qdq}, {"tune_forward", p.forward}, {"tune_backward", p.backward},
                             {"tune_step", p.step}, {"tune_mirrors", p.mirrors}, {"tune_warmup", p.warmup},
                             {"tune_exchange", p.exchange}, {"tune_teardown", p.teardown}})
    br.phase_seconds[k] = v;
  br.exchange_bytes = p.exchange_bytes;
  br.loss_first = tr.loss_first;
  br.loss_best = tr.loss_best;
  br.best_iter = tr.best_iter;
}

// Streams a finished block into every output: its tuned Linears packed (or fake-QDQ), the Linears
// kept in 16 bit recorded, every other tensor of the block copied unchanged. A MoE layer's experts are
// written one tensor per expert Linear under their per-expert names in either input layout (as
// AutoRound unfuses a fused checkpoint); a kept expert of a fused input is written from its fp32 copy
// in the stored dtype (exact: the values came from it).
void write_block(Context& ctx, const HfModel& model, int64_t layer, const BlockWeights& w,
                 const quant::BlockTuneResult& tr, const BlockReport& br, OutputSet& outputs) {
  const std::string prefix = HfModel::layer_prefix(layer);
  std::set<std::string> packed;
  for (const auto& L : tr.layers) {
    packed.insert(L.name);
    outputs.add_linear(ctx, prefix + L.name, L);
  }
  for (const auto& k : br.kept_fp) outputs.keep_fp(k.substr(0, k.find(' ')));
  // The table (model/block_tensors.h): norms, biases and buffers, then the untuned Linears under their
  // in-block names, then the 16-bit Linears under their stored names.
  const auto stored = [&](const BlockTensor& t) { return t.stored.empty() ? prefix + t.name : t.stored; };
  // A slice of a fused expert tensor (a weight or a gpt-oss bias) is written alone under its per-expert
  // name, from its fp32 copy in the stored dtype (exact: the values came from it; MXFP4 in bf16).
  const auto unfused = [&](const BlockTensor& t) {  // gpt-oss's MXFP4 experts (no such tensor): bf16, exact
    const StTensorInfo* info = model.info(t.stored);
    const DType dt = info ? info->dtype : DType::BF16;
    outputs.add_tensor(ctx, prefix + t.name, t.in(w), dt == DType::F8E4M3 ? DType::BF16 : dt);
  };
  for (const BlockTensor& t : w.tensors)
    if (t.role == TensorRole::Norm || t.role == TensorRole::Bias || t.role == TensorRole::Buffer) {
      if (t.offset >= 0) unfused(t);
      else outputs.copy_tensor(model, stored(t), ctx);
    }
  for (const BlockTensor& t : w.tensors) {
    if (t.role != TensorRole::Linear || packed.count(t.module())) continue;
    if (t.offset >= 0) unfused(t);
    else outputs.copy_tensor(model, stored(t), ctx, prefix + t.name);
  }
  for (const BlockTensor& t : w.tensors)
    if (t.role == TensorRole::Kept) outputs.copy_tensor(model, stored(t), ctx);
}

// A MoE block's routing in the log: how many experts the calibration tokens never reached.
void log_routing(const BlockReport& br, int64_t blocks) {
  const auto& n = br.expert_tokens;
  const int64_t idle = std::count(n.begin(), n.end(), int64_t(0));
  const auto [lo, hi] = std::minmax_element(n.begin(), n.end());
  char line[200];
  if (idle == 0)
    std::snprintf(line, sizeof line, "block %lld/%lld: every one of %zu experts received tokens (%lld to %lld each)",
                  (long long)(br.index + 1), (long long)blocks, n.size(), (long long)*lo, (long long)*hi);
  else
    std::snprintf(line, sizeof line,
                  "block %lld/%lld: %lld of %zu experts received no token (tokens per expert %lld to %lld); they keep "
                  "their initial rounding",
                  (long long)(br.index + 1), (long long)blocks, (long long)idle, n.size(), (long long)*lo, (long long)*hi);
  log_info(line);
}

// The block's log line, and with --verbose its tuning phases.
void log_block(const BlockReport& br, int64_t blocks, const quant::BlockTuneResult& tr, bool verbose) {
  char line[256];
  if (br.best_iter < 0)  // --iters 0: no tuning loss to report
    std::snprintf(line, sizeof line, "block %lld/%lld: %zu Linears quantized, %.1f s, peak mem %.0f MiB",
                  (long long)(br.index + 1), (long long)blocks, tr.layers.size(), br.seconds, br.peak_rss_mb);
  else
    std::snprintf(line, sizeof line, "block %lld/%lld: loss %.6g -> %.6g at iter %d, %.1f s, peak mem %.0f MiB",
                  (long long)(br.index + 1), (long long)blocks, br.loss_first, br.loss_best, br.best_iter, br.seconds,
                  br.peak_rss_mb);
  log_info(line);
  if (!verbose) return;
  const auto& p = tr.phases;
  std::snprintf(line, sizeof line,
                "block %lld phases (world %d): mirrors %.3f warmup %.3f forward %.3f backward %.3f exchange %.3f "
                "(%.1f MB) step %.3f teardown %.3f s",
                (long long)(br.index + 1), br.world_tune, p.mirrors, p.warmup, p.forward, p.backward, p.exchange,
                double(p.exchange_bytes) / 1e6, p.step, p.teardown);
  log_info(line);
}
}  // namespace steps
}  // namespace ar
