#include "model/loader.h"

#include "core/error.h"
#include "core/printable.h"
#include "io/json_file.h"
#include "io/json_unique.h"
#include "io/gptq_pack.h"
#include "io/mapped_file.h"
#include "model/block_tensors.h"
#include "model/dequant_float.h"

#include <cstring>

namespace ar {

BlockPtrs<const float*> BlockWeights::ptrs() const {
  auto p = [](const Tensor& t) -> const float* { return t.defined() ? t.f32() : nullptr; };
  BlockPtrs<const float*> r;
  r.ln1 = p(ln1); r.wq = p(wq); r.wk = p(wk); r.wv = p(wv); r.bq = p(bq); r.bk = p(bk); r.bv = p(bv);
  r.q_norm = p(q_norm); r.k_norm = p(k_norm); r.wo = p(wo); r.bo = p(bo); r.ln2 = p(ln2); r.wg = p(wg);
  r.wu = p(wu); r.wd = p(wd); r.sinks = p(sinks); r.ln_post_attn = p(ln_post_attn); r.ln_post_ffn = p(ln_post_ffn);
  r.q_a = p(q_a); r.q_a_norm = p(q_a_norm); r.q_b = p(q_b); r.kv_a = p(kv_a); r.kv_a_norm = p(kv_a_norm);
  r.kv_b = p(kv_b);
  r.in_qkvz = p(in_qkvz); r.in_ba = p(in_ba); r.conv = p(conv); r.dt_bias = p(dt_bias); r.A_log = p(A_log);
  r.dnorm = p(dnorm); r.in_z = p(in_z); r.in_b = p(in_b); r.in_a = p(in_a);
  r.attn = attn;
  r.delta_split = in_z.defined();
  r.q_lora = q_a.defined();
  r.router = p(router); r.router_bias = p(router_bias); r.score_bias = p(score_bias);
  r.sg = p(sg); r.su = p(su); r.sd = p(sd); r.sgate = p(sgate);
  for (size_t e = 0; e < eg.size(); ++e) {
    r.eg.push_back(p(eg[e]));
    r.eu.push_back(p(eu[e]));
    r.ed.push_back(p(ed[e]));
  }
  for (size_t e = 0; e < ebg.size(); ++e) {
    r.ebg.push_back(p(ebg[e]));
    r.ebu.push_back(p(ebu[e]));
    r.ebd.push_back(p(ebd[e]));
  }
  return r;
}

size_t BlockWeights::bytes() const {
  size_t n = 0;
  for (const BlockTensor& t : tensors)
    if (t.in(*this).defined()) n += t.in(*this).nbytes();
  return n;
}

std::unique_ptr<HfModel> HfModel::open(const std::string& dir) {
  auto m = std::unique_ptr<HfModel>(new HfModel());
  m->dir_ = dir;
  const std::string cfg_path = dir + "/config.json";
  if (!file_exists(cfg_path)) fail(ErrorKind::InvalidInput, dir + ": no config.json (not a Hugging Face model directory)");
  m->cfg_ = load_model_config(cfg_path);
  m->context_field_ = cfg_path + ": max_position_embeddings";
  const std::string index = dir + "/model.safetensors.index.json", single = dir + "/model.safetensors";
  std::vector<std::string> files;
  if (file_exists(index)) {
    const std::string text = read_text_file(index);
    auto j = parse_json_unique(text.data(), text.data() + text.size(), index, "field");
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail(ErrorKind::InvalidInput, index + ": no weight_map object");
    std::map<std::string, size_t> shard_ids;
    std::map<std::string, std::string> want;  // tensor -> shard
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(ErrorKind::InvalidInput, index + ": weight_map['" + printable(it.key()) + "'] is not a string");
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..")
        fail(ErrorKind::InvalidInput, index + ": shard name '" + printable(shard) + "' must be a plain file name");
      if (!shard_ids.count(shard)) {
        if (!file_exists(dir + "/" + shard))
          fail(ErrorKind::InvalidInput, index + ": shard '" + printable(shard) + "' (holding tensor '" + printable(it.key()) + "') is missing");
        shard_ids[shard] = files.size();
        files.push_back(shard);
      }
      want[it.key()] = shard;
    }
    for (const auto& f : files) m->shards_.push_back(SafetensorsFile::open(dir + "/" + f));
    m->check_unique_across_shards();
    for (const auto& [name, shard] : want) {
      size_t s = shard_ids[shard];
      if (!m->shards_[s]->find(name))
        fail(ErrorKind::InvalidInput, index + ": tensor '" + printable(name) + "' is not in its shard '" + printable(shard) + "'");
      m->where_[name] = {s, name};
    }
  } else if (file_exists(single)) {
    m->shards_.push_back(SafetensorsFile::open(single));
    for (const auto& t : m->shards_[0]->header().tensors) m->where_[t.name] = {0, t.name};
  } else {
    fail(ErrorKind::InvalidInput, dir + ": neither model.safetensors nor model.safetensors.index.json found");
  }
  m->map_names();
  m->detect_mixtral_spelling();
  m->check_tensors();
  m->check_values();
  m->round_embed_scale();
  return m;
}

void HfModel::map_names() {
  if (!cfg_.multimodal) {  // a text checkpoint's tensors outside the model (Qwen3-Next's mtp.*) are copied
    for (const auto& [name, at] : where_)
      if (!NameMap::is_text(name)) foreign_.push_back(name);
    return;
  }
  std::vector<std::string> stored;
  for (const auto& [name, at] : where_) stored.push_back(name);
  names_ = NameMap::detect(stored, dir_);
  std::map<std::string, Stored> by_text;
  for (auto& [name, at] : where_) {
    const std::optional<std::string> text = names_.text_name(name);
    if (!text) foreign_.push_back(name);
    by_text[text ? *text : name] = at;
  }
  where_ = std::move(by_text);
}

const SafetensorsFile& HfModel::shard_of(const std::string& name, const StTensorInfo** info) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + names_.stored(name) + "' is missing");
  const SafetensorsFile& shard = *shards_[it->second.shard];
  *info = shard.find(it->second.name);
  return shard;
}

// transformers multiplies the embeddings by embed_scale cast to the weights' dtype (Gemma's
// sqrt(hidden_size): sqrt(2560) = 50.596 is 50.5 in bf16), as vLLM does.
void HfModel::round_embed_scale() {
  const StTensorInfo* e = info("model.embed_tokens.weight");
  if (cfg_.embed_scale <= 0 || !e) return;
  const float s = float(cfg_.embed_scale);
  if (e->dtype == DType::BF16) cfg_.embed_scale = bf16_to_f32(f32_to_bf16(s));
  else if (e->dtype == DType::F16) cfg_.embed_scale = f16_to_f32(f32_to_f16(s));
  else cfg_.embed_scale = s;
}

std::unique_ptr<HfModel> HfModel::from_source(const std::string& path, const ModelConfig& cfg,
                                              std::unique_ptr<const TensorSource> source,
                                              const std::string& context_field) {
  auto m = std::unique_ptr<HfModel>(new HfModel());
  m->dir_ = path;
  m->context_field_ = context_field;
  m->cfg_ = cfg;
  m->source_ = std::move(source);
  return m;
}

// Packed AWQ-layout Linear -> fp32 [out, in].
static Tensor dequantize_awq(const HfModel& m, const std::string& prefix, const Shape& expect, Context& ctx) {
  const QuantConfig& q = m.config().quant;
  const int64_t out = expect[0], in = expect[1];
  const int64_t g = q.group_size <= 0 ? in : q.group_size, groups = (in + g - 1) / g;
  const StTensorInfo* qinfo = m.info(prefix + ".qweight");  // rows padded to whole groups, as for GPTQ below
  const bool padded = qinfo && groups * g != in && qinfo->shape == Shape{groups * g, out / 8};
  Tensor qw = m.load_raw(prefix + ".qweight", {padded ? groups * g : in, out / 8}, DType::I32, ctx);
  Tensor qz = m.load_raw(prefix + ".qzeros", {groups, out / 8}, DType::I32, ctx);
  Tensor sc = m.load(prefix + ".scales", {groups, out}, ctx);
  Tensor w = Tensor::empty({out, in}, DType::F32, ctx);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const int64_t gi = i / g;
      w.f32()[o * in + i] = sc.f32()[gi * out + o] * (float(awq_get(qw.data<int32_t>(), out, i, o)) -
                                                      float(awq_get(qz.data<int32_t>(), out, gi, o)));
    }
  return w;
}

// Packed GPTQ-layout Linear (qweight/qzeros/scales) -> fp32 [out, in].
static Tensor dequantize_gptq(const HfModel& m, const std::string& prefix, const Shape& expect, Context& ctx) {
  const QuantConfig& q = m.config().quant;
  const QuantConfig::Packing pk = q.packing({prefix, m.names().module(prefix), m.names().stored(prefix)});
  const int64_t out = expect[0], in = expect[1], bits = pk.bits;
  const int64_t g = pk.group_size <= 0 || pk.group_size > in ? in : pk.group_size, groups = (in + g - 1) / g;
  // AutoRound's model-free route pads the input dimension with zeros to a multiple of the group size
  // before packing (qweight rows for round_up(in, g) inputs; qzeros/scales keep ceil(in/g) groups):
  // both row counts are read, the padding rows are never used.
  const int64_t rows = (in * bits + 31) / 32, padded_rows = (groups * g * bits + 31) / 32;
  const StTensorInfo* qinfo = m.info(prefix + ".qweight");
  const bool padded = qinfo && padded_rows != rows && qinfo->shape == Shape{padded_rows, out};
  Tensor qw = m.load_raw(prefix + ".qweight", {padded ? padded_rows : rows, out}, DType::I32, ctx);
  Tensor qz = m.load_raw(prefix + ".qzeros", {groups, (out * bits + 31) / 32}, DType::I32, ctx);
  Tensor sc = m.load(prefix + ".scales", {groups, out}, ctx);
  Tensor w = Tensor::empty({out, in}, DType::F32, ctx);
  const int32_t* qwp = qw.data<int32_t>();
  const int32_t* qzp = qz.data<int32_t>();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const int64_t gi = i / g;
      const float z = float(gptq_zero(qzp, out, int(bits), gi, o)) + (q.zero_minus_one ? 1.f : 0.f);
      w.f32()[o * in + i] = sc.f32()[gi * out + o] * (float(gptq_code(qwp, out, int(bits), i, o)) - z);
    }
  return w;
}

const StTensorInfo& HfModel::raw_info(const std::string& name, const uint8_t** bytes) const {
  const StTensorInfo* info = nullptr;
  const SafetensorsFile& shard = shard_of(name, &info);
  *bytes = shard.bytes(*info);
  return *info;
}

Tensor HfModel::load_raw(const std::string& name, const Shape& expect, DType dtype, Context& ctx) const {
  const StTensorInfo* info = nullptr;
  const SafetensorsFile& shard = shard_of(name, &info);
  if (info->shape != expect || info->dtype != dtype)
    fail(ErrorKind::InvalidInput, shard.path() + ": tensor '" + info->name + "' is " + dtype_safetensors_name(info->dtype) +
                                      " " + shape_str(info->shape) + ", expected " + dtype_safetensors_name(dtype) + " " +
                                      shape_str(expect));
  Tensor t = Tensor::empty(expect, dtype, ctx);
  std::memcpy(t.raw(), shard.bytes(*info), t.nbytes());
  return t;
}

Tensor HfModel::load(const std::string& name, const Shape& expect, Context& ctx) const {
  if (source_) return source_->load(name, expect, ctx);
  const std::string suffix = ".weight";
  if (cfg_.quant.present && expect.size() == 2 && name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string prefix = name.substr(0, name.size() - suffix.size());
    if (check_float_linear(*this, prefix, expect)) return dequantize_float_linear(*this, prefix, expect, ctx);
    if (!has(name) && has(prefix + ".qweight"))
      return cfg_.quant.awq ? dequantize_awq(*this, prefix, expect, ctx) : dequantize_gptq(*this, prefix, expect, ctx);
  }
  const StTensorInfo* info = nullptr;
  const SafetensorsFile& shard = shard_of(name, &info);
  if (!expect.empty() && info->shape != expect)
    fail(ErrorKind::InvalidInput, shard.path() + ": tensor '" + info->name + "' has shape " + shape_str(info->shape) +
                                      ", config.json implies " + shape_str(expect));
  return shard.load_f32(info->name, ctx);
}

// Every tensor of the layer's table (model/block_tensors.h), a fused expert as its slice of the stored tensor.
BlockWeights HfModel::load_block(int64_t layer, Context& ctx) const {
  if (layer < 0 || layer >= cfg_.num_layers)
    fail(ErrorKind::InvalidInput, "layer " + std::to_string(layer) + " out of range");
  const std::string p = layer_prefix(layer);
  const bool moe = cfg_.is_moe_layer(layer);
  BlockWeights w;
  w.tensors = block_tensors(cfg_, layer, moe && fused_experts(layer));
  w.size_lists();
  w.attn = cfg_.block_dims(layer).attn;
  w.mixtral_names = moe && cfg_.moe.mixtral_names;
  for (const BlockTensor& t : w.tensors) {
    const std::string stored = t.stored.empty() ? p + t.name : t.stored;
    if (t.columns.cols > 0 && t.role == TensorRole::Linear && cfg_.quant.mxfp4_experts)
      t.in(w) = stored_columns(load_mxfp4_expert(stored, t.stored_shape, t.index, ctx), t, ctx);
    else if (t.columns.cols > 0)
      t.in(w) = stored_columns(load_slice(stored, t.offset, {t.columns.rows * t.columns.cols}, ctx), t, ctx);
    else
      t.in(w) = t.offset >= 0 ? load_slice(stored, t.offset, t.shape, ctx) : load(stored, t.shape, ctx);
    if (t.role == TensorRole::Norm && t.unit_offset) unit_offset(t.in(w));
  }
  return w;
}

// Gemma's RMSNorm multiplies by 1 + w in fp32 (ModelConfig::norm_unit_offset): the 1 is added on load.
void HfModel::unit_offset(Tensor& norm) const {
  if (!cfg_.norm_unit_offset) return;
  float* p = norm.f32();
  for (int64_t i = 0; i < norm.numel(); ++i) p[i] = 1.0f + p[i];
}

std::vector<std::string> HfModel::stored_names(const std::string& prefix) const {
  std::vector<std::string> r;
  for (auto it = where_.lower_bound(prefix); it != where_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    r.push_back(it->first);
  return r;
}

Tensor HfModel::load_embeddings(Context& ctx) const {
  return load("model.embed_tokens.weight", {cfg_.vocab_size, cfg_.hidden_size}, ctx);
}
Tensor HfModel::load_final_norm(Context& ctx) const {
  Tensor n = load("model.norm.weight", {cfg_.hidden_size}, ctx);
  unit_offset(n);
  return n;
}
Tensor HfModel::load_lm_head(Context& ctx) const {
  if (cfg_.tie_word_embeddings || !(has("lm_head.weight") || has("lm_head.qweight") || has("lm_head.weight_packed"))) {
    if (!cfg_.tie_word_embeddings)
      fail(ErrorKind::InvalidInput, dir_ + ": tensor 'lm_head.weight' is missing and tie_word_embeddings is false");
    return load_embeddings(ctx);
  }
  return load("lm_head.weight", {cfg_.vocab_size, cfg_.hidden_size}, ctx);
}

}  // namespace ar
