#include "pipeline/gguf_output.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "export/gguf_model.h"
#include "model/linear_specs.h"
#include "model/moe_names.h"

namespace ar {

namespace {
// The tensor kind a preset's rules see, from the HF name.
quant::GgufTensorKind kind_of(const std::string& n) {
  using K = quant::GgufTensorKind;
  if (n == "model.embed_tokens.weight") return K::TokenEmbd;
  if (n == "lm_head.weight") return K::Output;
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
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  const char* block[] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                         "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                         "self_attn.v_proj.bias", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                         "self_attn.o_proj.weight", "self_attn.o_proj.bias", "post_attention_layernorm.weight",
                         "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
  for (const auto& n : names)
    if (const StTensorInfo* info = model.info(n)) declare(n, info->shape);
  names.clear();
  for (int64_t b = 0; b < cfg_.num_layers; ++b) {
    for (const char* t : block) {
      const std::string n = HfModel::layer_prefix(b) + t;
      if (const StTensorInfo* info = model.info(n)) declare(n, info->shape);
    }
    if (cfg_.is_moe_layer(b)) declare_moe(b);
  }
  names.push_back("model.norm.weight");
  if (!cfg_.tie_word_embeddings && model.has("lm_head.weight")) names.push_back("lm_head.weight");
  for (const auto& n : names)
    if (const StTensorInfo* info = model.info(n)) declare(n, info->shape);
  writer_->write_header();
  for (size_t i = 0; i < extras_.size(); ++i) writer_->write_tensor_data(order_[i].substr(1), extras_[i].data(), extras_[i].size());
  next_ = extras_.size();
}

// A MoE layer's router (f32, as convert_hf_to_gguf forces it), its experts stacked per projection (one
// declaration each, filled expert by expert) and Qwen2-MoE's shared expert and gate (f32, 1-D).
void GgufOutput::declare_moe(int64_t layer) {
  const std::string p = HfModel::layer_prefix(layer);
  const int64_t C = cfg_.hidden_size, E = cfg_.moe.num_experts, I = cfg_.moe.expert_intermediate,
                Is = cfg_.moe.shared_intermediate;
  declare(p + (cfg_.moe.mixtral_names ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), {E, C}, 1, true);
  const ExpertProj projs[3] = {ExpertProj::Gate, ExpertProj::Up, ExpertProj::Down};
  for (ExpertProj j : projs)
    declare(p + expert_linear_name(cfg_.moe.mixtral_names, 0, j) + ".weight",
            j == ExpertProj::Down ? Shape{C, I} : Shape{I, C}, E);
  if (!Is) return;
  for (ExpertProj j : projs)
    declare(p + shared_linear_name(j) + ".weight", j == ExpertProj::Down ? Shape{C, Is} : Shape{Is, C});
  declare(p + "mlp.shared_expert_gate.weight", {C});
}

// `parts` > 1: the stacked experts of a layer, keyed by the GGUF name (their HF names, one per expert,
// resolve to it: gguf_tensor_name). f32: a 2-D tensor kept in f32 (a router).
void GgufOutput::declare(const std::string& hf_name, const Shape& shape, int64_t parts, bool f32) {
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
  std::vector<uint64_t> dims = {uint64_t(d.cols)};
  if (shape.size() == 2) dims.push_back(uint64_t(d.rows));
  if (parts > 1) dims.push_back(uint64_t(parts));
  writer_->add_tensor_info(d.gguf_name, dims, uint32_t(d.type),
                           uint64_t(parts * d.rows * quant::ggml_row_bytes(d.type, d.cols)));
  const std::string key = parts > 1 ? d.gguf_name : hf_name;
  order_.push_back(key);
  decl_[key] = std::move(d);
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
  AR_CHECK(bytes.size() == rb * size_t(d.rows), "gguf: " + hf_name + " has the wrong byte count");
  if (d.parts > 1) {  // an expert: its rows into the stacked tensor, staged once every expert is in
    if (d.stack.empty()) d.stack.resize(bytes.size() * size_t(d.parts));
    AR_CHECK(!d.filled.count(part), "gguf: " + hf_name + " was added twice");
    std::memcpy(d.stack.data() + size_t(part) * bytes.size(), bytes.data(), bytes.size());
    d.filled.insert(part);
    if (int64_t(d.filled.size()) < d.parts) return;
    staged_[it->first] = std::move(d.stack);
    return flush();
  }
  if (!d.row_order.empty()) {
    const size_t unit = bytes.size() / d.row_order.size();  // a row; an element of a 1-D q/k bias
    std::vector<uint8_t> moved(bytes.size());
    for (size_t r = 0; r < d.row_order.size(); ++r)
      std::memcpy(moved.data() + r * unit, bytes.data() + size_t(d.row_order[r]) * unit, unit);
    bytes.swap(moved);
  }
  staged_[hf_name] = std::move(bytes);
  flush();
}

void GgufOutput::add_f32(const std::string& hf_name, const float* data, int64_t n) {
  AR_CHECK(expects(hf_name), "gguf: " + hf_name + " is not declared");
  AR_CHECK(type_of(hf_name) == quant::GgmlType::F32, "gguf: " + hf_name + " is not an f32 tensor");
  const auto* p = reinterpret_cast<const uint8_t*>(data);
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
