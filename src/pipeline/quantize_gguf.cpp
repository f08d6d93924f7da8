// QuantizeRun's GGUF output (--format gguf:<preset>, docs/gguf.md): the embeddings, the block's
// Linears chosen, their scales fixed for SignRound or searched, the block written, the file finished;
// and the data-free round-to-nearest run.
#include <filesystem>

#include "core/log.h"
#include "pipeline/quantize_run.h"
#include "pipeline/report.h"
#include "pipeline/run_steps.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_search.h"

namespace ar {

// The tensor in the type the GGUF preset gives it: 2-D by round-to-nearest (quant/gguf_rtn.h), 1-D
// as f32.
void QuantizeRun::gguf_add(Context& c, const std::string& name, const Tensor& t) {
  if (!gguf_->expects(name)) return;
  if (t.shape().size() == 1) {
    if (gguf_fake_) gguf_fake_->copy_tensor(*model_, name, c);
    return gguf_->add_f32(name, t.f32(), t.numel());
  }
  Tensor deq = gguf_fake_ ? Tensor::empty(t.shape(), DType::F32, c) : Tensor();
  gguf_->add(name, quant::gguf_quantize_rtn(c, gguf_->type_of(name), t.f32(), t.dim(0), t.dim(1),
                                            gguf_fake_ ? deq.f32() : nullptr));
  if (gguf_fake_) gguf_fake_->add_tensor(c, name, deq);
}

// The GGUF file (in --output_dir, or in its subdirectory beside fake's when fake is asked for too).
void QuantizeRun::gguf_open() {
  const FormatPlan formats = plan_formats(opt_);
  std::string dir = out_->tmp();
  if (formats.several) {
    dir += "/" + format_subdir(formats.gguf);
    std::filesystem::create_directories(dir);
  }
  if (formats.gguf_fake) {
    QuantizeOptions fo = opt_;
    fo.format = "fake";
    gguf_fake_ = std::make_unique<OutputSet>(fo, out_->tmp() + "/" + format_subdir("fake"), kShardBytes);
  }
  gguf_ = std::make_unique<GgufOutput>(dir, *model_, *gguf_scheme_);
}

// GGUF: the embeddings in the preset's type; the q-chain starts from their dequantized values, as
// AutoRound re-caches block 0's quantized inputs when it quantizes the embeddings.
void QuantizeRun::gguf_embeddings(const Tensor& emb) {
  const std::string name = "model.embed_tokens.weight";
  const quant::GgmlType t = gguf_->type_of(name);
  Tensor deq = Tensor::empty(emb.shape(), DType::F32, *ctx_);
  gguf_->add(name, quant::gguf_quantize_rtn(*ctx_, t, emb.f32(), emb.dim(0), emb.dim(1), deq.f32()));
  if (gguf_fake_) gguf_fake_->add_tensor(*ctx_, name, deq);
  if (!opt_.quanted_input) return;
  gguf_x_q_ = Tensor::empty(x_fp_.shape(), act_dtype_, *ctx_);
  steps::embed(*ctx_, deq, calib_.ids.data() + shard_.sample_begin * T_, gguf_x_q_, shard_.samples(), T_, C_);
}

// GGUF: the block's Linears whose preset type has scales (the others are written as f16/bf16/f32).
std::set<std::string> QuantizeRun::gguf_tuned_layers(BlockWeights& w, const std::string& prefix, int64_t* tuned_elems) {
  std::set<std::string> selected;
  *tuned_elems = 0;
  gguf_prefix_ = prefix;
  gguf_params_.clear();
  for (auto& [nm, t] : quant::block_linears(w)) {
    const quant::GgmlType type = gguf_->type_of(prefix + nm + ".weight");
    if (!quant::ggml_is_kquant(type) && !quant::ggml_is_legacy(type)) continue;
    selected.insert(nm);
    *tuned_elems += t->numel();
  }
  return selected;
}

// GGUF: a Linear's scales and mins fixed before tuning (AutoRound's `_dq` wrapper: the search once,
// then only V is tuned: quant/qdq_fixed.h), so the tuned weights are exactly what the file holds.
void QuantizeRun::gguf_fix_params(Context& c, quant::TunedLinear& L) {
  const Tensor& W = *L.weight;
  const std::string name = gguf_prefix_ + L.name + ".weight";
  quant::GgufLayerParams p = gguf_layer_params(c, L.name, W);
  L.fixed = p.qdq();
  const int64_t ng = L.fixed->out * L.fixed->groups();
  L.V = Tensor::zeros({W.dim(0), W.dim(1)}, DType::F32, c);
  L.scale = Tensor::empty({ng}, DType::F32, c);
  L.zero = Tensor::empty({ng}, DType::F32, c);
  quant::gguf_group_scales(p, L.scale.f32(), L.zero.f32());
  gguf_params_[L.name] = std::move(p);
}

// GGUF: a Linear's block parameters by AutoRound's search for the type (quant/gguf_search.h), weighted
// by the block's imatrix when there is one (round-to-nearest with --disable_opt_rtn).
quant::GgufLayerParams QuantizeRun::gguf_layer_params(Context& c, const std::string& short_name, const Tensor& W) {
  const quant::GgmlType t = gguf_->type_of(gguf_prefix_ + short_name + ".weight");
  if (opt_.disable_opt_rtn) return quant::gguf_params_rtn(c, t, W.f32(), W.dim(0), W.dim(1));
  const float* im = gguf_imat_ ? imatrix_for(*gguf_imat_, short_name).data() : nullptr;
  return quant::gguf_params_from_bytes(t, W.dim(0), W.dim(1),
                                       quant::gguf_quantize_search(c, t, W.f32(), W.dim(0), W.dim(1), im));
}

// GGUF --iters 0: the search's result replaces each selected Linear (packed later by gguf_write_block).
quant::BlockTuneResult QuantizeRun::gguf_search_block(BlockWeights& w, const std::set<std::string>& selected) {
  quant::BlockTuneResult r;
  gguf_params_.clear();
  for (auto& [nm, t] : quant::block_linears(w)) {
    if (!selected.count(nm)) continue;
    quant::GgufLayerParams p = gguf_layer_params(*ctx_, nm, *t);
    Tensor deq = Tensor::empty(t->shape(), DType::F32, *ctx_);
    quant::gguf_pack_codes(*ctx_, p, t->f32(), nullptr, deq.f32());  // the codes the search chose
    *t = deq;
    quant::TunedLinear L;
    L.name = nm;
    L.weight = t;
    r.layers.push_back(std::move(L));
    gguf_params_[nm] = std::move(p);
  }
  return r;
}

// GGUF: a finished block into the file. The tuned Linears hold s q - m; their codes are recovered from
// those values exactly ((w^ + m) / s is within 1e-6 of the integer q) and packed with the fixed
// scales; the other tensors go through gguf_add.
std::map<std::string, int> QuantizeRun::gguf_write_block(BlockWeights& w, const std::string& prefix,
                                                          const quant::BlockTuneResult& tr) {
  std::set<std::string> done;
  std::map<std::string, int> types;  // tensors written per ggml type, for the log
  auto count = [&](const std::string& name) {
    if (gguf_->expects(name)) types[quant::ggml_type_name(gguf_->type_of(name))]++;
  };
  for (const auto& L : tr.layers) {
    quant::GgufLayerParams& p = gguf_params_.at(L.name);
    gguf_->add(prefix + L.name + ".weight", quant::gguf_pack_codes(*ctx_, p, L.weight->f32(), nullptr));
    if (gguf_fake_) gguf_fake_->add_tensor(*ctx_, prefix + L.name + ".weight", *L.weight);
    count(prefix + L.name + ".weight");
    done.insert(L.name);
  }
  const std::pair<const char*, const Tensor*> rest[] = {
      {"input_layernorm.weight", &w.ln1}, {"post_attention_layernorm.weight", &w.ln2},
      {"self_attn.q_proj.bias", &w.bq}, {"self_attn.k_proj.bias", &w.bk}, {"self_attn.v_proj.bias", &w.bv},
      {"self_attn.o_proj.bias", &w.bo}, {"self_attn.q_norm.weight", &w.q_norm}, {"self_attn.k_norm.weight", &w.k_norm}};
  for (const auto& [nm, t] : rest)
    if (t->defined()) gguf_add(*ctx_, prefix + nm, *t), count(prefix + nm);
  for (auto& [nm, t] : quant::block_linears(w))  // untuned: float fallbacks, or every Linear of a plain RTN run
    if (!done.count(nm)) gguf_add(*ctx_, prefix + nm + ".weight", *t), count(prefix + nm + ".weight");
  return types;
}

// GGUF: the final norm and lm_head (unless tied), then the file is complete.
void QuantizeRun::gguf_finish_file() {
  gguf_add(*ctx_, "model.norm.weight", model_->load_final_norm(*ctx_));
  if (gguf_->expects("lm_head.weight")) gguf_add(*ctx_, "lm_head.weight", model_->load_lm_head(*ctx_));
  gguf_->finish();
  if (gguf_fake_)  // a plain round-to-nearest run reads no calibration data
    gguf_fake_->finish(opt_, calib_.n > 0 ? calib_.seqlen : opt_.calib.seqlen, false, gguf_scheme_->preset);
}

// --format gguf:<preset> --iters 0: every tensor quantized to its preset type, block by block; no
// calibration data is read.
void QuantizeRun::gguf_run() {
  const ModelConfig& cfg = model_->config();
  ctx_ = std::make_unique<Context>(Device{}, opt_.threads);
  log_info("gguf:" + gguf_scheme_->preset + ": round-to-nearest of every tensor in llama.cpp's per-tensor types; "
           "no calibration data");
  gguf_open();
  gguf_add(*ctx_, "model.embed_tokens.weight", model_->load_embeddings(*ctx_));
  for (int64_t b = 0; b < cfg.num_layers; ++b) {
    const auto t0 = Clock::now();
    const std::string prefix = HfModel::layer_prefix(b);
    BlockWeights w = model_->load_block(b, *ctx_);
    const std::map<std::string, int> types = gguf_write_block(w, prefix, quant::BlockTuneResult{});
    BlockReport br;
    br.index = b;
    br.seconds = seconds_since(t0);
    br.peak_rss_mb = peak_rss_mb();
    std::string line = "block " + std::to_string(b + 1) + "/" + std::to_string(cfg.num_layers) + ":";
    for (const auto& [type, count] : types) line += " " + type + " x" + std::to_string(count);
    char tail[64];
    std::snprintf(tail, sizeof tail, ", %.1f s, peak mem %.0f MiB", br.seconds, br.peak_rss_mb);
    log_info(line + tail);
    rep_.blocks.push_back(std::move(br));
  }
  gguf_finish_file();
  out_->commit();
  log_info("wrote " + out_->path() + "/" + std::filesystem::relative(gguf_->path(), out_->tmp()).string());
  rep_.seconds = seconds_since(t_start_);
  rep_.peak_rss_mb = peak_rss_mb();
  if (!report_path_.empty()) write_report(opt_, rep_, report_path_);
}

}  // namespace ar
