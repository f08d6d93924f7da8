// GGUF-backed HfModel (gguf_source.h): configuration from the architecture's keys, tensors checked at
// open and dequantized one at a time on load.
#include "model/gguf_source.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "export/gguf_model.h"
#include "io/gguf.h"
#include "model/moe_names.h"
#include "quant/ggml_types.h"

namespace ar {

namespace {
using quant::GgmlType;

struct ArchRow {
  const char* gguf;
  const char* hf;
};
constexpr ArchRow kArchs[] = {{"llama", "LlamaForCausalLM"},      {"qwen2", "Qwen2ForCausalLM"},
                               {"qwen3", "Qwen3ForCausalLM"},      {"qwen2moe", "Qwen2MoeForCausalLM"},
                               {"qwen3moe", "Qwen3MoeForCausalLM"}};  // llama with expert_count: Mixtral

std::string dims_str(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool is_integer_type(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 || t == GgufType::U32 ||
         t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}

// Typed reads of the architecture's keys, naming the file and key when a value is unusable.
struct Keys {
  const GgufFile& g;
  [[noreturn]] void bad(const std::string& key, const std::string& why) const {
    fail(ErrorKind::InvalidInput, g.path + ": key '" + key + "' " + why);
  }
  // A positive whole number (at most 2^40; parse_model_config applies the real limits).
  std::optional<int64_t> count(const std::string& key) const {
    const GgufValue* v = g.find(key);
    if (!v) return std::nullopt;
    if (!is_integer_type(v->type)) bad(key, "must be an integer");
    if (!(v->num >= 1 && v->num <= 0x1p40)) bad(key, "= " + std::to_string(v->num) + " is out of range (1 to 2^40)");
    return int64_t(v->num);
  }
  int64_t required_count(const std::string& key) const {
    auto v = count(key);
    if (!v) bad(key, "is missing");
    return *v;
  }
  // A positive finite number; an f32 is taken at its shortest decimal (1e-5f -> 1e-5), the value the
  // converter started from.
  double positive(const std::string& key, std::optional<double> def) const {
    const GgufValue* v = g.find(key);
    if (!v) {
      if (!def) bad(key, "is missing");
      return *def;
    }
    if (v->type != GgufType::F32 && v->type != GgufType::F64 && !is_integer_type(v->type)) bad(key, "must be a number");
    if (!(v->num > 0) || !std::isfinite(v->num)) bad(key, "must be a positive finite number");
    if (v->type != GgufType::F32) return v->num;
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, float(v->num));
    double d = v->num;
    std::from_chars(buf, r.ptr, d);
    return d;
  }
};

class GgufSource final : public TensorSource {
 public:
  struct Entry {
    const GgufTensorInfo* info = nullptr;
    uint64_t offset = 0;  // of its bytes in the data section (an expert's: inside its stacked tensor)
    GgmlType type = GgmlType::F32;
    Shape shape;  // HF shape
    const uint8_t* bytes = nullptr;
    uint64_t nbytes = 0;
    std::vector<int64_t> row_order;  // GGUF row i is HF row row_order[i]; empty: in place
  };

  explicit GgufSource(GgufFile g) : g_(std::move(g)) {}
  const GgufFile& file() const { return g_; }
  std::map<std::string, Entry>& entries() { return entries_; }

  bool has(const std::string& name) const override { return entries_.count(name) > 0; }

  Tensor load(const std::string& name, const Shape& expect, Context& ctx) const override {
    auto it = entries_.find(name);
    if (it == entries_.end()) fail(ErrorKind::InvalidInput, g_.path + ": tensor '" + name + "' is not in the file");
    const Entry& e = it->second;
    if (!expect.empty() && e.shape != expect)
      fail(ErrorKind::InvalidInput, g_.path + ": tensor '" + e.info->name + "' holds " + name + " " +
                                        shape_str(e.shape) + ", expected " + shape_str(expect));
    Tensor out = Tensor::empty(e.shape, DType::F32, ctx);
    const int64_t n = out.numel();
    if (e.row_order.empty()) {
      quant::ggml_dequantize(e.type, e.bytes, out.f32(), n);
    } else {
      std::vector<float> tmp(static_cast<size_t>(n));
      quant::ggml_dequantize(e.type, e.bytes, tmp.data(), n);
      const int64_t rows = int64_t(e.row_order.size()), len = n / rows;
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(out.f32() + e.row_order[size_t(r)] * len, tmp.data() + r * len, size_t(len) * sizeof(float));
    }
    g_.file->release(e.bytes, size_t(e.nbytes));
    const float* p = out.f32();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i]))
        fail(ErrorKind::InvalidInput, g_.path + ": tensor '" + e.info->name + "': non-finite value " +
                                          (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") + " at element " +
                                          std::to_string(i) + " of " + std::to_string(n));
    return out;
  }

 private:
  GgufFile g_;
  std::map<std::string, Entry> entries_;  // by HF name
};

// HF names and shapes of the tensors the computation reads (as HfModel::load_block names them).
std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& c, bool lm_head) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, QD = c.num_heads * c.head_dim,
                KD = c.num_kv_heads * c.head_dim, D = c.head_dim;
  std::vector<std::pair<std::string, Shape>> out = {{"model.embed_tokens.weight", {c.vocab_size, C}}};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = HfModel::layer_prefix(l);
    out.push_back({p + "input_layernorm.weight", {C}});
    out.push_back({p + "self_attn.q_proj.weight", {QD, C}});
    out.push_back({p + "self_attn.k_proj.weight", {KD, C}});
    out.push_back({p + "self_attn.v_proj.weight", {KD, C}});
    out.push_back({p + "self_attn.o_proj.weight", {C, QD}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {QD}});
      out.push_back({p + "self_attn.k_proj.bias", {KD}});
      out.push_back({p + "self_attn.v_proj.bias", {KD}});
    }
    if (c.o_bias) out.push_back({p + "self_attn.o_proj.bias", {C}});
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {D}});
      out.push_back({p + "self_attn.k_norm.weight", {D}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {C}});
    if (c.is_moe_layer(l)) {
      const int64_t E = c.moe.num_experts, Ie = c.moe.expert_intermediate, Is = c.moe.shared_intermediate;
      out.push_back({router_weight_name(c, l, false), {E, C}});
      for (int64_t e = 0; e < E; ++e) {
        out.push_back({expert_weight_name(c, l, e, ExpertProj::Gate), {Ie, C}});
        out.push_back({expert_weight_name(c, l, e, ExpertProj::Up), {Ie, C}});
        out.push_back({expert_weight_name(c, l, e, ExpertProj::Down), {C, Ie}});
      }
      if (Is) {
        out.push_back({shared_expert_name(l, ExpertProj::Gate), {Is, C}});
        out.push_back({shared_expert_name(l, ExpertProj::Up), {Is, C}});
        out.push_back({shared_expert_name(l, ExpertProj::Down), {C, Is}});
        out.push_back({shared_gate_name(l), {1, C}});
      }
      continue;
    }
    out.push_back({p + "mlp.gate_proj.weight", {I, C}});
    out.push_back({p + "mlp.up_proj.weight", {I, C}});
    out.push_back({p + "mlp.down_proj.weight", {C, I}});
  }
  out.push_back({"model.norm.weight", {C}});
  if (lm_head) out.push_back({"lm_head.weight", {c.vocab_size, C}});
  return out;
}

// The safetensors overlap rule (io/safetensors.cpp): sorted by (begin, end), every tensor starts at or
// after the furthest end so far, so no two tensors share bytes (all at offset 0, or a projection aliasing
// the embeddings, would read one tensor's bytes as another's) while zero-size tensors and gaps may sit
// at boundaries.
void check_no_overlap(const std::string& path, const std::map<std::string, GgufSource::Entry>& entries) {
  struct Range { uint64_t begin, end; const std::string* name; };
  std::vector<Range> rs;
  for (const auto& [hf, e] : entries) rs.push_back({e.offset, e.offset + e.nbytes, &e.info->name});
  std::sort(rs.begin(), rs.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t furthest = 0;
  const std::string* owner = nullptr;
  for (const Range& r : rs) {
    if (owner && r.begin < furthest)
      fail(ErrorKind::InvalidInput, path + ": tensors '" + *owner + "' and '" + *r.name + "' overlap (data bytes " +
                                        std::to_string(r.begin) + " < " + std::to_string(furthest) + ")");
    if (r.end >= furthest) {
      furthest = r.end;
      owner = r.name;
    }
  }
}

// The config.json fields of a MoE family from llama.cpp's keys (what its graph does: every layer MoE,
// top-k renormalized for qwen3moe and Mixtral, not for qwen2moe).
void moe_keys(const Keys& k, const std::string& a, const std::string& arch, nlohmann::json& j) {
  const int64_t E = k.required_count(a + "expert_count"), K = k.required_count(a + "expert_used_count");
  j["num_experts_per_tok"] = K;
  if (arch == "llama") {  // Mixtral: experts of feed_forward_length
    j["num_local_experts"] = E;
    return;
  }
  j["num_experts"] = E;
  j["moe_intermediate_size"] = k.required_count(a + "expert_feed_forward_length");
  j["norm_topk_prob"] = arch == "qwen3moe";
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array();
  if (arch == "qwen2moe")  // llama.cpp's default for a missing key: feed_forward_length
    j["shared_expert_intermediate_size"] =
        k.count(a + "expert_shared_feed_forward_length").value_or(j["intermediate_size"].get<int64_t>());
}

ModelConfig gguf_config(const GgufFile& g, const std::map<std::string, const GgufTensorInfo*>& by_name) {
  const std::string arch = g.string("general.architecture", "");
  const char* hf = nullptr;
  for (const auto& a : kArchs)
    if (arch == a.gguf) hf = a.hf;
  if (!hf)
    fail(ErrorKind::Unsupported,
         g.path + ": GGUF architecture '" + arch + "' is not supported (llama, qwen2, qwen3, qwen2moe, qwen3moe)");
  const Keys k{g};
  const std::string a = arch + ".";
  const std::optional<int64_t> experts = k.count(a + "expert_count");
  if (arch == "llama" && experts) hf = "MixtralForCausalLM";
  const std::string s = g.string(a + "rope.scaling.type", "none");
  if (s != "none" || by_name.count("rope_freqs.weight"))
    fail(ErrorKind::Unsupported, g.path + ": rope scaling ('" + (s != "none" ? s : std::string("rope_freqs.weight")) +
                                     "') is not supported when reading GGUF files");
  nlohmann::json j;
  j["architectures"] = {hf};
  j["hidden_size"] = k.required_count(a + "embedding_length");
  j["num_hidden_layers"] = k.required_count(a + "block_count");
  j["intermediate_size"] = k.required_count(a + "feed_forward_length");
  const int64_t heads = k.required_count(a + "attention.head_count");
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = k.count(a + "attention.head_count_kv").value_or(heads);
  j["max_position_embeddings"] = k.required_count(a + "context_length");
  if (auto d = k.count(a + "attention.key_length")) j["head_dim"] = *d;
  const int64_t head_dim =
      j.contains("head_dim") ? j["head_dim"].get<int64_t>() : j["hidden_size"].get<int64_t>() / heads;
  for (const char* key : {"attention.value_length", "rope.dimension_count"})
    if (auto v = k.count(a + key); v && *v != head_dim)
      fail(ErrorKind::Unsupported, g.path + ": key '" + a + key + "' = " + std::to_string(*v) +
                                       " differs from the head size " + std::to_string(head_dim) + " (not supported)");
  j["rms_norm_eps"] = k.positive(a + "attention.layer_norm_rms_epsilon", std::nullopt);
  j["rope_theta"] = k.positive(a + "rope.freq_base", 10000.0);
  const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
  if (tokens && tokens->type == GgufType::Array && tokens->elem == GgufType::String)
    j["vocab_size"] = int64_t(tokens->strs.size());
  else if (auto v = k.count(a + "vocab_size"))
    j["vocab_size"] = *v;
  else if (auto e = by_name.find("token_embd.weight"); e != by_name.end() && e->second->dims.size() >= 2 &&
                                                          e->second->dims[1] >= 1 && e->second->dims[1] <= (1u << 30))
    j["vocab_size"] = int64_t(e->second->dims[1]);
  else
    fail(ErrorKind::InvalidInput,
         g.path + ": no vocabulary size (tokenizer.ggml.tokens, " + a + "vocab_size or token_embd.weight)");
  if (j["vocab_size"].get<int64_t>() < 1) fail(ErrorKind::InvalidInput, g.path + ": the vocabulary is empty");
  // Every special-token id must name a token (an out-of-range bos was dropped before, which changed
  // what eval scores); llama.cpp's "none" (-1, 0xFFFFFFFF) leaves the id unset.
  g.check_token_ids(j["vocab_size"].get<int64_t>());
  for (const char* key : {"bos", "eos"})
    if (const int64_t id = g.token_id(std::string("tokenizer.ggml.") + key + "_token_id", j["vocab_size"]); id >= 0)
      j[std::string(key) + "_token_id"] = id;
  j["tie_word_embeddings"] = by_name.count("output.weight") == 0;
  if (experts || arch == "qwen2moe" || arch == "qwen3moe") moe_keys(k, a, arch, j);
  ModelConfig c = parse_model_config(j, g.path + " (GGUF keys)");
  c.qkv_bias = by_name.count("blk.0.attn_q.bias") > 0;
  c.o_bias = by_name.count("blk.0.attn_output.bias") > 0;
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe" || by_name.count("blk.0.attn_q_norm.weight") > 0;
  return c;
}
}  // namespace

std::unique_ptr<HfModel> open_gguf_model(const std::string& path) {
  auto src = std::make_unique<GgufSource>(GgufFile::open(path));
  const GgufFile& g = src->file();
  std::map<std::string, const GgufTensorInfo*> by_name;
  for (const auto& t : g.tensors)
    if (!by_name.emplace(t.name, &t).second)
      fail(ErrorKind::InvalidInput, path + ": tensor '" + t.name + "' appears twice");
  const ModelConfig cfg = gguf_config(g, by_name);
  std::set<std::string> used;
  for (const auto& [hf, shape] : expected_tensors(cfg, !cfg.tie_word_embeddings)) {
    int64_t expert = -1;  // an expert's Linear: part `expert` of its layer's stacked tensor
    const std::string name = gguf_tensor_name(hf, cfg, &expert);
    auto it = by_name.find(name);
    if (it == by_name.end()) fail(ErrorKind::InvalidInput, path + ": tensor '" + name + "' is missing (" + hf + ")");
    const GgufTensorInfo& t = *it->second;
    auto bad = [&](ErrorKind kind, const std::string& why) { fail(kind, path + ": tensor '" + name + "' " + why); };
    if (!quant::ggml_type_known(t.type))
      bad(ErrorKind::Unsupported, "has ggml type " + std::to_string(t.type) +
                                      ", which is not decoded here (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, "
                                      "q3_k, q4_k, q5_k, q6_k)");
    std::vector<uint64_t> want = {uint64_t(shape.back())};  // ggml order: ne0 = row length
    if (shape.size() == 2 && shape[0] > 1) want.push_back(uint64_t(shape[0]));
    if (expert >= 0) want.push_back(uint64_t(cfg.moe.num_experts));
    std::vector<uint64_t> dims = t.dims;
    while (dims.size() > want.size() && dims.back() == 1) dims.pop_back();
    if (dims != want)
      bad(ErrorKind::InvalidInput, "has ggml dims " + dims_str(t.dims) + ", the model's keys imply " + dims_str(want) +
                                       " (" + hf + " " + shape_str(shape) + ")");
    GgufSource::Entry e;
    e.info = &t;
    e.type = GgmlType(t.type);
    e.shape = shape;
    const int64_t cols = shape.back(), rows = shape.size() == 2 ? shape[0] : 1;
    if (cols % quant::ggml_block_elems(e.type) != 0)
      bad(ErrorKind::InvalidInput, "is " + std::string(quant::ggml_type_name(e.type)) + " with rows of " +
                                       std::to_string(cols) + " elements, not a multiple of its block of " +
                                       std::to_string(quant::ggml_block_elems(e.type)));
    e.nbytes = uint64_t(rows) * uint64_t(quant::ggml_row_bytes(e.type, cols));  // < 2^60: shapes are limited
    if (expert >= 0) {  // the whole stack is checked against the file, then this expert's rows taken
      const uint8_t* all = g.tensor_data(t, e.nbytes * uint64_t(cfg.moe.num_experts));
      e.bytes = all + e.nbytes * uint64_t(expert);
      e.offset = t.offset + e.nbytes * uint64_t(expert);
    } else {
      e.bytes = g.tensor_data(t, e.nbytes);
      e.offset = t.offset;
    }
    e.row_order = gguf_tensor_row_order(hf, cfg);
    used.insert(name);
    src->entries()[hf] = std::move(e);
  }
  check_no_overlap(path, src->entries());
  for (const auto& t : g.tensors)
    if (!used.count(t.name))
      fail(ErrorKind::Unsupported, path + ": tensor '" + t.name + "' is not part of a " + cfg.architecture +
                                       " model as read here (its meaning would be lost)");
  const std::string arch = g.string("general.architecture", "");
  return HfModel::from_source(path, cfg, std::move(src), path + ": " + arch + ".context_length");
}

std::unique_ptr<HfModel> open_model(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? open_gguf_model(path) : HfModel::open(path);
}

}  // namespace ar
