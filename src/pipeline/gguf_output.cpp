#include "pipeline/gguf_output.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "export/gguf_model.h"
#include "model/block_tensors.h"
#include "model/linear_specs.h"
#include "model/moe_names.h"

namespace ar {

namespace {
// The tensor kind a preset's rules see, from the HF name.
quant::GgufTensorKind kind_of(const std::string& n) {
  using K = quant::GgufTensorKind;
  if (n == "model.embed_tokens.weight") return K::TokenEmbd;
  if (n == "lm_head.weight") return K::Output;
  for (const char* mla : {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"})
    if (n.find(mla) != std::string::npos) return K::Other;
  // Gated DeltaNet: llama.cpp's attn_qkv is attn_v-like (category_is_attn_v); attn_gate and ssm_out are other.
  if (n.find(".linear_attn.") != std::string::npos) return n.find(".in_proj_qkv") != std::string::npos ? K::AttnV : K::Other;
  for (auto [part, k] : {std::pair{"q_proj", K::AttnQ}, {"k_proj", K::AttnK}, {"v_proj", K::AttnV}, {"o_proj", K::AttnOutput},
                         {"gate_proj", K::FfnGate}, {"up_proj", K::FfnUp}, {"down_proj", K::FfnDown},
                         {".w1.", K::FfnGate}, {".w3.", K::FfnUp}, {".w2.", K::FfnDown}})
    if (n.find(part) != std::string::npos) return k;
  fail(ErrorKind::Internal, "gguf: no tensor kind for " + n);
}

int64_t layer_of(const std::string& n) {
  const std::string p = "model.layers.";
  return n.rfind(p, 0) == 0 ? std::stoll(n.substr(p.size())) : 0;
}

}  // namespace

namespace {
quant::GgmlType stored_type(const HfModel& m, const std::string& name) {
  const StTensorInfo* info = m.info(name);
  if (!info) info = m.info("model.embed_tokens.weight");  // a fused expert stack: the model's dtype
  const DType d = info ? info->dtype : DType::F32;
  return d == DType::BF16 ? quant::GgmlType::BF16 : d == DType::F16 ? quant::GgmlType::F16 : quant::GgmlType::F32;
}
}  // namespace

// The 2-D tensors the user keeps, in their stored type; a layer's experts all or none.
void GgufOutput::plan_kept(const HfModel& model, const std::function<bool(const std::string&)>& kept) {
  if (!kept) return;
  auto keep = [&](const std::string& weight) {
    kept_[weight] = stored_type(model, weight);
    kept_names_.push_back(weight);
  };
  for (const char* n : {"model.embed_tokens", "lm_head"})
    if (kept(n)) keep(std::string(n) + ".weight");
  const ExpertProj projs[3] = {ExpertProj::Gate, ExpertProj::Up, ExpertProj::Down};
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const std::string p = HfModel::layer_prefix(l);
    for (const auto& s : block_linear_specs(cfg_, l))
      if (s.group.find(".*.") == std::string::npos && kept(p + s.name)) keep(p + s.name + ".weight");
    if (!cfg_.is_moe_layer(l)) continue;
    for (ExpertProj j : projs) {
      std::string some, not_all;
      for (int64_t e = 0; e < cfg_.moe.num_experts; ++e)
        (kept(p + expert_linear_name(cfg_.moe.mixtral_names, e, j)) ? some : not_all) =
            p + expert_linear_name(cfg_.moe.mixtral_names, e, j);
      if (!some.empty() && !not_all.empty())
        fail(ErrorKind::InvalidInput, "--format gguf: " + some + " is kept in 16 bit but " + not_all +
                                          " is not: llama.cpp stacks a layer's experts in one tensor of one type "
                                          "(keep every expert of the layer, e.g. --fp_layers " + p + "mlp.experts., or none)");
      if (!some.empty()) keep(p + expert_linear_name(cfg_.moe.mixtral_names, 0, j) + ".weight");
    }
  }
}

GgufOutput::GgufOutput(const std::string& dir, const HfModel& model, const quant::GgufScheme& scheme,
                       const std::function<bool(const std::string&)>& kept)
    : cfg_(model.config()), scheme_(scheme) {
  plan_kept(model, kept);
  const std::string name = std::filesystem::path(model.dir()).filename().string();
  path_ = dir + "/" + (name.empty() ? std::string("model") : name) + "-" + scheme.file_tag + ".gguf";
  writer_ = std::make_unique<GgufWriter>(path_);
  add_gguf_model_metadata(*writer_, cfg_, model.dir(), scheme.file_type, name);
  for (const auto& x : gguf_extra_tensors(cfg_)) {
    writer_->add_tensor_info(x.name, x.dims, uint32_t(quant::GgmlType::F32), x.data.size() * 4);
    extras_.emplace_back(reinterpret_cast<const uint8_t*>(x.data.data()),
                         reinterpret_cast<const uint8_t*>(x.data.data()) + x.data.size() * 4);
    order_.push_back("#" + x.name);  // written first, from extras_
  }
  if (const StTensorInfo* info = model.info("model.embed_tokens.weight")) declare("model.embed_tokens.weight", info->shape);
  for (int64_t b = 0; b < cfg_.num_layers; ++b) declare_layer(b);
  declare("model.norm.weight", {cfg_.hidden_size});
  if (!cfg_.tie_word_embeddings && model.has("lm_head.weight")) declare("lm_head.weight", {cfg_.vocab_size, cfg_.hidden_size});
  writer_->write_header();
  for (size_t i = 0; i < extras_.size(); ++i) writer_->write_tensor_data(order_[i].substr(1), extras_[i].data(), extras_[i].size());
  next_ = extras_.size();
}

namespace {
// llama.cpp's converter order of a layer's tensors (their names without "blk.N.").
constexpr const char* kLayerOrder[] = {
    "attn_norm.weight", "attn_q_a_norm.weight", "attn_kv_a_norm.weight", "attn_q_a.weight", "attn_q_b.weight",
    "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias", "attn_v.weight", "attn_v.bias",
    "attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a", "ssm_ba.weight",
    "ssm_beta.weight", "ssm_alpha.weight", "ssm_norm.weight", "ssm_out.weight",
    "attn_kv_a_mqa.weight", "attn_v_b.weight", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight",
    "attn_output.bias", "attn_sinks.weight", "post_attention_norm.weight", "ffn_norm.weight", "ffn_gate.weight",
    "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias", "exp_probs_b.bias",
    "ffn_gate_exps.weight", "ffn_gate_exps.bias", "ffn_up_exps.weight", "ffn_up_exps.bias", "ffn_down_exps.weight",
    "ffn_down_exps.bias", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
    "ffn_gate_inp_shexp.weight"};

size_t layer_rank(const std::string& gguf_name) {
  const std::string leaf = gguf_name.substr(gguf_name.find('.', 4) + 1);  // past "blk.N."
  for (size_t i = 0; i < std::size(kLayerOrder); ++i)
    if (leaf == kLayerOrder[i]) return i;
  fail(ErrorKind::Internal, "gguf: no place in the layer's order for " + gguf_name);
}
}  // namespace

// A layer's tensors from its table (model/block_tensors.h), in the converter's order: 1-D ones and routers
// f32, a MoE layer's experts (and gpt-oss's expert biases) stacked per projection (declared once, filled
// expert by expert), a shared
// expert's gate [1, C] as 1-D and the conv kernel [conv_dim, 1, K] as 2-D (unit dims dropped), MLA's kv_b_proj
// as attn_k_b and attn_v_b, in_proj_qkvz as attn_qkv and attn_gate.
void GgufOutput::declare_layer(int64_t layer) {
  const std::string p = HfModel::layer_prefix(layer);
  std::vector<std::pair<size_t, BlockTensor>> items;
  for (BlockTensor& t : block_tensors(cfg_, layer, false))
    if (!t.list || t.index == 0) items.emplace_back(layer_rank(gguf_tensor_name(p + t.name, cfg_)), std::move(t));
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [rank, t] : items) {
    const std::string hf = p + t.name;
    Shape squeezed;
    for (int64_t n : t.shape)
      if (n != 1) squeezed.push_back(n);
    if (squeezed.empty()) squeezed.push_back(1);
    if (t.list) declare(hf, t.shape, cfg_.moe.num_experts);
    else if (t.role != TensorRole::Linear) declare(hf, squeezed, 1, true);
    else if (is_mla_kv_b(hf)) declare_kv_b(hf, t.shape);
    else if (auto parts = gguf_tensor_parts(hf, cfg_); !parts.empty()) declare_parts(hf, t.shape, parts);
    else declare(hf, t.shape);
  }
}

// A Linear written as several tensors of its rows, each in the Linear's type; the first keyed by the HF
// name, the others by "<hf>#<their llama.cpp name>".
void GgufOutput::declare_parts(const std::string& hf_name, const Shape& shape, const std::vector<GgufRowPart>& parts) {
  const Decl whole = make_decl(hf_name, shape, 1, false);
  for (size_t i = 0; i < parts.size(); ++i) {
    Decl d = whole;
    d.gguf_name = parts[i].gguf_name;
    d.row_order = parts[i].rows;
    d.rows = int64_t(d.row_order.size());
    const std::string key = i == 0 ? hf_name : hf_name + "#" + d.gguf_name;
    if (i > 0) more_parts_[hf_name].push_back(key);
    enter(key, std::move(d), {uint64_t(whole.cols), uint64_t(parts[i].rows.size())});
  }
}

// MLA's kv_b_proj (export/gguf_model.h): attn_k_b first (the converter's order), in F16 when kv_b's type
// is a quantized one (its rows run along kv_lora, the key part's transposed rows along nope, so the tuned
// blocks cannot carry over: the key part is written as the tuned values), else in kv_b's own type; then
// attn_v_b, kv_b's value rows in its type, bytes unchanged.
void GgufOutput::declare_kv_b(const std::string& hf_name, const Shape& shape) {
  const MlaKvB d = mla_kv_b_dims(cfg_);
  Decl v = make_decl(hf_name, shape, 1, false), k;
  v.v_b_rows = mla_v_b_rows(d);
  k.gguf_name = gguf_mla_k_b_name(hf_name, cfg_);
  k.rows = d.heads * d.kv_lora;
  k.cols = d.nope;
  const bool plain = v.type == quant::GgmlType::F32 || v.type == quant::GgmlType::F16 || v.type == quant::GgmlType::BF16;
  k.type = plain ? v.type : quant::GgmlType::F16;
  enter(hf_name + "#k_b", std::move(k), {uint64_t(d.nope), uint64_t(d.kv_lora), uint64_t(d.heads)});
  enter(hf_name, std::move(v), {uint64_t(d.kv_lora), uint64_t(d.v), uint64_t(d.heads)});
}

// The declaration of an HF tensor: its llama.cpp name and the type the preset (or --fp_layers) gives it.
// `parts` > 1: the stacked experts of a layer, keyed by the GGUF name (their HF names, one per expert,
// resolve to it: gguf_tensor_name). f32: a 2-D tensor kept in f32 (a router).
GgufOutput::Decl GgufOutput::make_decl(const std::string& hf_name, const Shape& shape, int64_t parts, bool f32) const {
  Decl d;
  int64_t expert = -1;
  d.gguf_name = gguf_tensor_name(hf_name, cfg_, &expert);
  d.parts = parts;
  d.cols = shape.back();
  d.rows = shape.size() == 2 ? shape[0] : 1;
  if (shape.size() == 2 && !f32) {
    quant::GgufTensorKind k = kind_of(hf_name);
    if (k == quant::GgufTensorKind::TokenEmbd && cfg_.tie_word_embeddings) k = quant::GgufTensorKind::Output;
    d.type = scheme_.type_of(k, layer_of(hf_name), cfg_.num_layers, d.cols,
                             cfg_.num_heads / std::max<int64_t>(1, cfg_.num_kv_heads), cfg_.moe.num_experts);
    if (auto it = kept_.find(hf_name); it != kept_.end()) d.type = it->second;
  }
  d.row_order = gguf_tensor_row_order(hf_name, cfg_);
  d.src_units = shape.size() == 2 ? d.rows : d.cols;
  return d;
}

// The tensor's entry in the file's header, and its place in the file's order.
void GgufOutput::enter(const std::string& key, Decl d, const std::vector<uint64_t>& dims) {
  writer_->add_tensor_info(d.gguf_name, dims, uint32_t(d.type), uint64_t(d.bytes()));
  order_.push_back(key);
  decl_[key] = std::move(d);
}

void GgufOutput::declare(const std::string& hf_name, const Shape& shape, int64_t parts, bool f32) {
  Decl d = make_decl(hf_name, shape, parts, f32);
  std::vector<uint64_t> dims = {uint64_t(d.cols)};
  if (shape.size() == 2) dims.push_back(uint64_t(d.rows));
  if (parts > 1) dims.push_back(uint64_t(parts));
  const std::string key = parts > 1 ? d.gguf_name : hf_name;
  enter(key, std::move(d), dims);
}

std::string GgufOutput::types_summary() const {
  struct Type {
    int64_t count = 0;
    std::vector<std::string> roles;
  };
  std::vector<std::pair<quant::GgmlType, Type>> types;  // first seen first
  for (const std::string& key : order_) {
    const bool extra = key[0] == '#';  // rope_freqs
    const quant::GgmlType t = extra ? quant::GgmlType::F32 : decl_.at(key).type;
    std::string role = extra ? key.substr(1) : decl_.at(key).gguf_name;
    if (role.rfind("blk.", 0) == 0) role = role.substr(role.find('.', 4) + 1);
    if (role.size() > 7 && role.compare(role.size() - 7, 7, ".weight") == 0) role.resize(role.size() - 7);
    auto it = std::find_if(types.begin(), types.end(), [t](const auto& e) { return e.first == t; });
    if (it == types.end()) it = types.insert(types.end(), {t, Type{}});
    ++it->second.count;
    if (std::find(it->second.roles.begin(), it->second.roles.end(), role) == it->second.roles.end())
      it->second.roles.push_back(role);
  }
  std::string s = std::to_string(order_.size()) + (order_.size() == 1 ? " tensor: " : " tensors: ");
  for (size_t i = 0; i < types.size(); ++i) {
    const auto& [t, e] = types[i];
    s += i ? ", " : "";
    s += quant::ggml_type_name(t);
    s += " x" + std::to_string(e.count) + " (";
    for (size_t r = 0; r < e.roles.size(); ++r) {
      s += r ? ", " : "";
      s += e.roles[r];
    }
    s += ")";
  }
  return s;
}

// The declaration an HF name fills, and the part of it (an expert of a stacked tensor, else 0).
std::pair<const std::string, GgufOutput::Decl>* GgufOutput::find(const std::string& hf_name, int64_t* part) {
  *part = 0;
  if (auto it = decl_.find(hf_name); it != decl_.end()) return &*it;
  if (hf_name.find("experts.") == std::string::npos) return nullptr;
  int64_t e = -1;
  const std::string g = gguf_tensor_name(hf_name, cfg_, &e);
  auto it = decl_.find(g);
  if (it == decl_.end() || e < 0 || e >= it->second.parts) return nullptr;
  *part = e;
  return &*it;
}

std::vector<int64_t> GgufOutput::col_order(const std::string& hf_name) const {
  return gguf_tensor_col_order(hf_name, cfg_);
}

bool GgufOutput::expects(const std::string& hf_name) const {
  int64_t part = 0;
  return const_cast<GgufOutput*>(this)->find(hf_name, &part) != nullptr;
}

quant::GgmlType GgufOutput::type_of(const std::string& hf_name) const {
  int64_t part = 0;
  const auto* it = const_cast<GgufOutput*>(this)->find(hf_name, &part);
  if (!it) fail(ErrorKind::Internal, "gguf: " + hf_name + " is not declared");
  return it->second.type;
}

void GgufOutput::add(const std::string& hf_name, std::vector<uint8_t> bytes) {
  int64_t part = 0;
  auto* it = find(hf_name, &part);
  if (!it) fail(ErrorKind::Internal, "gguf: " + hf_name + " is not declared");
  Decl& d = it->second;
  const size_t rb = size_t(quant::ggml_row_bytes(d.type, d.cols));
  const int64_t src_rows = d.row_order.empty() || d.rows == 1 ? d.rows : d.src_units;
  AR_CHECK(bytes.size() == rb * size_t(src_rows), "gguf: " + hf_name + " has the wrong byte count");
  if (d.parts > 1) {  // an expert: its rows into the stacked tensor, staged once every expert is in
    if (d.stack.empty()) d.stack.resize(bytes.size() * size_t(d.parts));
    AR_CHECK(!d.filled.count(part), "gguf: " + hf_name + " was added twice");
    std::memcpy(d.stack.data() + size_t(part) * bytes.size(), bytes.data(), bytes.size());
    d.filled.insert(part);
    if (int64_t(d.filled.size()) < d.parts) return;
    staged_[it->first] = std::move(d.stack);
    return flush();
  }
  if (!d.v_b_rows.empty()) {
    stage_kv_b(hf_name, d, bytes);
    return flush();
  }
  if (auto more = more_parts_.find(hf_name); more != more_parts_.end())
    for (const std::string& key : more->second) stage_rows(key, decl_.at(key), bytes);
  stage_rows(hf_name, d, bytes);
  flush();
}

// The declared rows of a checkpoint tensor's bytes (a row; an element of a 1-D tensor), into the file's order.
void GgufOutput::stage_rows(const std::string& key, const Decl& d, const std::vector<uint8_t>& bytes) {
  if (d.row_order.empty()) {
    staged_[key] = bytes;
    return;
  }
  const size_t unit = bytes.size() / size_t(d.src_units);
  std::vector<uint8_t> moved(d.row_order.size() * unit);
  for (size_t r = 0; r < d.row_order.size(); ++r)
    std::memcpy(moved.data() + r * unit, bytes.data() + size_t(d.row_order[r]) * unit, unit);
  staged_[key] = std::move(moved);
}

// MLA's kv_b_proj in kv_b's type: attn_v_b takes its value rows' bytes; attn_k_b the key rows' values,
// transposed per head, in its plain type (declare_kv_b).
void GgufOutput::stage_kv_b(const std::string& hf_name, const Decl& v, const std::vector<uint8_t>& bytes) {
  const MlaKvB d = mla_kv_b_dims(cfg_);
  const size_t rb = size_t(quant::ggml_row_bytes(v.type, v.cols));
  std::vector<uint8_t> vb(v.v_b_rows.size() * rb);
  for (size_t r = 0; r < v.v_b_rows.size(); ++r)
    std::memcpy(vb.data() + r * rb, bytes.data() + size_t(v.v_b_rows[r]) * rb, rb);
  std::vector<float> all(size_t(v.rows * v.cols)), kb(size_t(d.heads * d.kv_lora * d.nope));
  quant::ggml_dequantize(v.type, bytes.data(), all.data(), int64_t(all.size()));
  mla_k_b_from_kv_b(d, all.data(), kb.data());
  const std::string k_key = hf_name + "#k_b";
  const quant::GgmlType kt = decl_.at(k_key).type;
  std::vector<uint8_t> kbytes(kb.size() * (kt == quant::GgmlType::F32 ? 4 : 2));
  for (size_t i = 0; i < kb.size(); ++i) {
    if (kt == quant::GgmlType::F32) std::memcpy(kbytes.data() + 4 * i, &kb[i], 4);
    const uint16_t h = kt == quant::GgmlType::BF16 ? f32_to_bf16(kb[i]) : f32_to_f16(kb[i]);
    if (kt != quant::GgmlType::F32) std::memcpy(kbytes.data() + 2 * i, &h, 2);
  }
  staged_[k_key] = std::move(kbytes);
  staged_[hf_name] = std::move(vb);
}

void GgufOutput::add_f32(const std::string& hf_name, const float* data, int64_t n) {
  AR_CHECK(expects(hf_name), "gguf: " + hf_name + " is not declared");
  AR_CHECK(type_of(hf_name) == quant::GgmlType::F32, "gguf: " + hf_name + " is not an f32 tensor");
  std::vector<float> v(data, data + n);
  gguf_tensor_values(hf_name, v.data(), n);
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  add(hf_name, std::vector<uint8_t>(p, p + n * 4));
}

void GgufOutput::flush() {
  while (next_ < order_.size()) {
    auto it = staged_.find(order_[next_]);
    if (it == staged_.end()) return;
    writer_->write_tensor_data(decl_[order_[next_]].gguf_name, it->second.data(), it->second.size());
    staged_.erase(it);
    ++next_;
  }
}

void GgufOutput::finish() {
  if (next_ < order_.size()) fail(ErrorKind::Internal, "gguf: " + order_[next_] + " was never written");
  writer_->commit();
}

}  // namespace ar
