#include "pipeline/gguf_track.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/run_steps.h"
#include "pipeline/run_summary.h"
#include "quant/gguf_search.h"

namespace ar {

std::string GgufTrack::summary_line() const {
  return "quantizing to gguf:" + scheme_.preset + " (llama.cpp's per-tensor types) with " +
         (env_.opt.tune.iters > 0 ? "SignRound through the GGUF types, " + std::to_string(env_.opt.tune.iters) + " iterations"
                                  : std::string("AutoRound's imatrix-weighted scale search"));
}

// The file (in the output directory, or in its subdirectory beside fake's when fake is asked for too).
void GgufTrack::open(const std::string& dir) {
  dir_ = dir;
  std::string file_dir = dir;
  if (subdir_) {
    file_dir += "/" + format_subdir("gguf:" + scheme_.preset);
    std::filesystem::create_directories(file_dir);
  }
  if (with_fake_) {
    QuantizeOptions fo = env_.opt;
    fo.format = "fake";
    fake_ = std::make_unique<OutputSet>(fo, dir + "/" + format_subdir("fake"), kOutputShardBytes, env_.model);
  }
  const LayerRules rules = LayerRules::of(env_.opt);
  file_ = std::make_unique<GgufOutput>(file_dir, env_.model, scheme_, [&rules](const std::string& module) {
    return !kept_by_user(module, rules).empty();
  });
  log_info(label() + ": " + file_->types_summary());
  if (const size_t n = file_->kept().size(); n > 0) {
    std::string line = label();
    line += ": ";
    line += std::to_string(n);
    line += n == 1 ? " tensor kept in its stored type (--fp_layers / --layer_config): " : " tensors kept in their stored type (--fp_layers / --layer_config), e.g. ";
    line += file_->kept().front();
    log_info(line);
  }
}

namespace {
// A 2-D tensor with its columns moved into `order` (column j of the result is column order[j] of t), or
// `back` from it; t itself for an empty order.
Tensor move_columns(Context& c, const Tensor& t, const std::vector<int64_t>& order, bool back) {
  if (order.empty()) return t;
  Tensor r = Tensor::empty(t.shape(), DType::F32, c);
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const float* src = t.f32();
  float* dst = r.f32();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = order[size_t(j)];
      if (back) dst[i * cols + k] = src[i * cols + j];
      else dst[i * cols + j] = src[i * cols + k];
    }
  return r;
}

// Where each of the file's column groups of `group` lies in the checkpoint's order: group g of the file is
// the checkpoint's group at[g]. A column move that splits a group is refused naming the tensor.
std::vector<int64_t> group_places(const std::vector<int64_t>& order, int64_t group, const std::string& name) {
  std::vector<int64_t> at(order.size() / size_t(group));
  for (size_t g = 0; g < at.size(); ++g) {
    const int64_t first = order[g * size_t(group)];
    for (int64_t i = 0; i < group; ++i)
      if (order[g * size_t(group) + size_t(i)] != first + i || first % group)
        fail(ErrorKind::Unsupported, "GGUF export: " + name + ": llama.cpp's column order splits its " +
                                         std::to_string(group) + "-column groups (a value head's width is not a multiple)");
    at[g] = first / group;
  }
  return at;
}
}  // namespace

// The tensor in the type the preset gives it: 2-D by round-to-nearest (quant/gguf_rtn.h), in the file's
// column order; 1-D tensors and routers as f32 (the fake companion copies them as stored).
void GgufTrack::add(const std::string& name, const Tensor& t) {
  if (!file_->expects(name)) return;
  Context& c = env_.ctx;
  const std::vector<int64_t> cols = file_->col_order(name);
  const Tensor in_file = move_columns(c, t, cols, false);
  if (file_->type_of(name) == quant::GgmlType::F32) {
    if (fake_ && env_.model.has(name)) fake_->copy_tensor(env_.model, name, c);
    else if (fake_) fake_->add_tensor(c, name, t, DType::F32);  // a fused checkpoint's Mixtral router
    return file_->add_f32(name, in_file.f32(), in_file.numel());
  }
  Tensor deq = fake_ ? Tensor::empty(t.shape(), DType::F32, c) : Tensor();
  file_->add(name, quant::gguf_quantize_rtn(c, file_->type_of(name), in_file.f32(), t.dim(0), t.dim(1),
                                            fake_ ? deq.f32() : nullptr));
  if (fake_) fake_->add_tensor(c, name, move_columns(c, deq, cols, true));
}

// The embeddings in the preset's type; the chain starts from their dequantized values.
void GgufTrack::embeddings(const Tensor& emb, const std::function<void(const Tensor&, Tensor&)>& embed) {
  const std::string name = "model.embed_tokens.weight";
  Context& c = env_.ctx;
  Tensor deq = Tensor::empty(emb.shape(), DType::F32, c);
  file_->add(name, quant::gguf_quantize_rtn(c, file_->type_of(name), emb.f32(), emb.dim(0), emb.dim(1), deq.f32()));
  if (fake_) fake_->add_tensor(c, name, deq);
  if (env_.opt.quanted_input) embed(deq, x_q_);
}

// The block's Linears whose preset type has scales (the others are written as f16/bf16/f32).
quant::LayerFormats GgufTrack::select(BlockWeights& w, const std::string& prefix, BlockReport&, int64_t* elems) {
  quant::LayerFormats selected;
  *elems = 0;
  prefix_ = prefix;
  params_.clear();
  for (auto& [nm, t] : quant::block_linears(w)) {
    const quant::GgmlType type = file_->type_of(prefix + nm + ".weight");
    if (!quant::ggml_is_kquant(type) && !quant::ggml_is_legacy(type)) continue;
    selected.emplace(nm, format());
    *elems += t->numel();
  }
  return selected;
}

// A Linear's block parameters by AutoRound's search for the type, weighted by the block's imatrix when
// there is one (round-to-nearest with --disable_opt_rtn), in the file's column order.
quant::GgufLayerParams GgufTrack::layer_params(Context& c, const std::string& short_name, const Tensor& W_hf,
                                               const Imatrix* imat) {
  const std::string name = prefix_ + short_name + ".weight";
  const quant::GgmlType t = file_->type_of(name);
  const std::vector<int64_t> cols = file_->col_order(name);
  const Tensor W = move_columns(c, W_hf, cols, false);
  if (env_.opt.disable_opt_rtn) return quant::gguf_params_rtn(c, t, W.f32(), W.dim(0), W.dim(1));
  std::vector<float> im;
  if (imat) im = imatrix_for(*imat, short_name);
  if (imat && !cols.empty())
    for (size_t j = 0; j < cols.size(); ++j) im[j] = imatrix_for(*imat, short_name)[size_t(cols[j])];
  return quant::gguf_params_from_bytes(t, W.dim(0), W.dim(1),
                                       quant::gguf_quantize_search(c, t, W.f32(), W.dim(0), W.dim(1), imat ? im.data() : nullptr));
}

// A tuned Linear's scales and mins fixed before tuning; only V is tuned. A Linear the file holds with its
// columns moved (qwen35's out_proj) is tuned in the checkpoint's order with each group's s and m where the
// move puts it: the same per-element QDQ as the file's.
void GgufTrack::fix_params(Context& c, quant::TunedLinear& L, const Imatrix* imat) {
  const Tensor& W = *L.weight;
  quant::GgufLayerParams p = layer_params(c, L.name, W, imat);
  L.fixed = p.qdq();
  const int64_t ng = L.fixed->out * L.fixed->groups();
  L.V = Tensor::zeros({W.dim(0), W.dim(1)}, DType::F32, c);
  L.scale = Tensor::empty({ng}, DType::F32, c);
  L.zero = Tensor::empty({ng}, DType::F32, c);
  quant::gguf_group_scales(p, L.scale.f32(), L.zero.f32());
  const std::string name = prefix_ + L.name + ".weight";
  if (const std::vector<int64_t> cols = file_->col_order(name); !cols.empty()) {
    const std::vector<int64_t> at = group_places(cols, L.fixed->group, name);
    const int64_t per_row = L.fixed->groups();
    std::vector<float> s(L.scale.f32(), L.scale.f32() + ng), m(L.zero.f32(), L.zero.f32() + ng);
    for (int64_t r = 0; r < L.fixed->out; ++r)
      for (int64_t g = 0; g < per_row; ++g) {
        L.scale.f32()[r * per_row + at[size_t(g)]] = s[size_t(r * per_row + g)];
        L.zero.f32()[r * per_row + at[size_t(g)]] = m[size_t(r * per_row + g)];
      }
  }
  params_[L.name] = std::move(p);
}

std::function<void(Context&, quant::TunedLinear&)> GgufTrack::tuning_hook(const BlockStats& st) {
  const Imatrix* imat = st.imatrix;
  return [this, imat](Context& c, quant::TunedLinear& L) { fix_params(c, L, imat); };
}

// --iters 0: the search's result replaces each selected Linear (packed later by write_block).
quant::BlockTuneResult GgufTrack::search(const quant::TuneLane&, BlockWeights& w, const quant::LayerFormats& selected,
                                         const BlockStats& st) {
  quant::BlockTuneResult r;
  params_.clear();
  for (auto& [nm, t] : quant::block_linears(w)) {
    if (!selected.count(nm)) continue;
    quant::GgufLayerParams p = layer_params(env_.ctx, nm, *t, st.imatrix);
    const std::vector<int64_t> cols = file_->col_order(prefix_ + nm + ".weight");
    const Tensor in_file = move_columns(env_.ctx, *t, cols, false);
    Tensor deq = Tensor::empty(t->shape(), DType::F32, env_.ctx);
    quant::gguf_pack_codes(env_.ctx, p, in_file.f32(), nullptr, deq.f32());  // the codes the search chose
    *t = move_columns(env_.ctx, deq, cols, true);
    quant::TunedLinear L;
    L.name = nm;
    L.weight = t;
    r.layers.push_back(std::move(L));
    params_[nm] = std::move(p);
  }
  return r;
}

// A finished block into the file. The tuned Linears hold s q - m; their codes are recovered from those
// values exactly ((w^ + m) / s is within 1e-6 of the integer q) and packed with the fixed scales; the
// other tensors go through add(). Returns the tensors written per ggml type, for the log.
std::map<std::string, int> GgufTrack::write_tensors(BlockWeights& w, const std::string& prefix,
                                                    const quant::BlockTuneResult& tr) {
  std::set<std::string> done;
  std::map<std::string, int> types;
  auto count = [&](const std::string& name) {
    if (file_->expects(name)) types[quant::ggml_type_name(file_->type_of(name))]++;
  };
  for (const auto& L : tr.layers) {
    quant::GgufLayerParams& p = params_.at(L.name);
    const Tensor in_file = move_columns(env_.ctx, *L.weight, file_->col_order(prefix + L.name + ".weight"), false);
    file_->add(prefix + L.name + ".weight", quant::gguf_pack_codes(env_.ctx, p, in_file.f32(), nullptr));
    if (fake_) fake_->add_tensor(env_.ctx, prefix + L.name + ".weight", *L.weight);
    count(prefix + L.name + ".weight");
    done.insert(L.name);
  }
  for (const BlockTensor& t : w.tensors) {  // norms, biases and 16-bit Linears (a MoE router), f32
    if (t.role == TensorRole::Linear) continue;
    add(prefix + t.name, t.in(w)), count(prefix + t.name);
  }
  for (auto& [nm, t] : quant::block_linears(w))  // untuned: float fallbacks, or every Linear of a plain RTN run
    if (!done.count(nm)) add(prefix + nm + ".weight", *t), count(prefix + nm + ".weight");
  return types;
}

void GgufTrack::write_block(BlockWeights& w, int64_t layer, quant::BlockTuneResult& tr, BlockReport&,
                            const BlockStats&) {
  write_tensors(w, HfModel::layer_prefix(layer), tr);
}

void GgufTrack::report_tuning(const quant::BlockTuneResult& tr, BlockReport& br) {
  br.gguf = {tr.loss_first, tr.loss_best, tr.best_iter};
}

// The final norm and lm_head (unless tied), then the file is complete.
void GgufTrack::finish(const TrackFinish& in) {
  add("model.norm.weight", env_.model.load_final_norm(env_.ctx));
  if (file_->expects("lm_head.weight")) add("lm_head.weight", env_.model.load_lm_head(env_.ctx));
  file_->finish();
  if (!env_.model.foreign_names().empty())
    log_info(label() + ": the GGUF file holds the language model; the " +
             std::to_string(env_.model.foreign_names().size()) +
             " tensors outside it are not written (a vision tower and projector go into llama.cpp's separate mmproj "
             "file; MTP layers are not run)" + (fake_ ? " (the fake output has them)" : ""));
  if (fake_) {
    fake_->copy_foreign(env_.ctx);
    fake_->finish(env_.opt, in.seqlen, false, scheme_.preset);
  }
}

// --iters 0 --disable_opt_rtn: every tensor in its preset type, block by block.
std::string GgufTrack::write_data_free() {
  const ModelConfig& cfg = env_.model.config();
  log_info(label() + ": round-to-nearest of every tensor in llama.cpp's per-tensor types; no calibration data");
  add("model.embed_tokens.weight", env_.model.load_embeddings(env_.ctx));
  for (int64_t b = 0; b < cfg.num_layers; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string prefix = HfModel::layer_prefix(b);
    BlockWeights w = env_.model.load_block(b, env_.ctx);
    const std::map<std::string, int> types = write_tensors(w, prefix, quant::BlockTuneResult{});
    BlockReport br;
    br.index = b;
    br.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    br.peak_rss_mb = peak_rss_mb();
    std::string line = "block " + std::to_string(b + 1) + "/" + std::to_string(cfg.num_layers) + ":";
    for (const auto& [type, n] : types) line += " " + type + " x" + std::to_string(n);
    char tail[64];
    std::snprintf(tail, sizeof tail, ", %.1f s, peak mem %.0f MiB", br.seconds, br.peak_rss_mb);
    log_info(line + tail);
    env_.rep.blocks.push_back(std::move(br));
  }
  const Tensor no_chain;
  const std::vector<uint8_t> no_mask;
  finish(TrackFinish{no_chain, env_.opt.calib.seqlen, no_mask});
  return std::filesystem::relative(file_->path(), dir_).string();
}

}  // namespace ar
