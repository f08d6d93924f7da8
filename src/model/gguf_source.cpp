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
#include "model/arch/arch.h"
#include "model/block_tensors.h"
#include "quant/ggml_types.h"

namespace ar {

namespace {
using quant::GgmlType;

std::string dims_str(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool is_integer_type(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 || t == GgufType::U32 ||
         t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}

// Typed reads of the architecture's keys ("<arch>.<key>"), naming the file and key when a value is unusable.
class Keys final : public GgufKeyReader {
 public:
  Keys(const GgufFile& g, std::string arch) : g_(g), arch_(std::move(arch)) {}
  const std::string& arch() const override { return arch_; }
  [[noreturn]] void bad(const std::string& key, const std::string& why) const override {
    fail(ErrorKind::InvalidInput, g_.path + ": key '" + full(key) + "' " + why);
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const override {
    fail(ErrorKind::Unsupported, g_.path + ": key '" + full(key) + "' " + why);
  }
  // A whole number from `lo` to 2^40 (parse_model_config applies the real limits).
  std::optional<int64_t> whole(const std::string& key, double lo) const {
    const GgufValue* v = g_.find(full(key));
    if (!v) return std::nullopt;
    if (!is_integer_type(v->type)) bad(key, "must be an integer");
    if (!(v->num >= lo && v->num <= 0x1p40))
      bad(key, "= " + std::to_string(v->num) + " is out of range (" + std::to_string(int(lo)) + " to 2^40)");
    return int64_t(v->num);
  }
  std::optional<int64_t> count(const std::string& key) const override { return whole(key, 1); }
  std::optional<int64_t> natural(const std::string& key) const override { return whole(key, 0); }
  std::optional<double> number(const std::string& key) const override {
    const GgufValue* v = g_.find(full(key));
    if (!v) return std::nullopt;
    if (v->type != GgufType::F32 && v->type != GgufType::F64 && !is_integer_type(v->type)) bad(key, "must be a number");
    if (!std::isfinite(v->num)) bad(key, "must be a finite number");
    if (v->type != GgufType::F32) return v->num;
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, float(v->num));
    double d = v->num;
    std::from_chars(buf, r.ptr, d);
    return d;
  }
  std::optional<bool> flag(const std::string& key) const override {
    const GgufValue* v = g_.find(full(key));
    if (!v) return std::nullopt;
    if (v->type != GgufType::Bool) bad(key, "must be a bool");
    return v->num != 0;
  }
  std::optional<std::string> text(const std::string& key) const override {
    if (!g_.find(full(key))) return std::nullopt;
    return g_.string(full(key), "");
  }
  std::optional<std::vector<bool>> flags(const std::string& key) const override {
    const GgufValue* v = g_.find(full(key));
    if (!v) return std::nullopt;
    if (v->type != GgufType::Array || v->elem != GgufType::Bool) bad(key, "must be an array of bools");
    std::vector<bool> out;
    for (double x : v->nums) out.push_back(x != 0);
    return out;
  }
  bool has(const std::string& key) const override { return g_.find(full(key)) != nullptr; }
  // A positive finite number, `def` when absent (none: required).
  double positive(const std::string& key, std::optional<double> def) const {
    const std::optional<double> v = number(key);
    if (!v && !def) bad(key, "is missing");
    if (v && !(*v > 0)) bad(key, "must be a positive finite number");
    return v ? *v : *def;
  }

 private:
  std::string full(const std::string& key) const { return arch_ + "." + key; }
  const GgufFile& g_;
  std::string arch_;
};

class GgufSource final : public TensorSource {
 public:
  struct Entry {
    const GgufTensorInfo* info = nullptr;
    std::string hf;  // the HF tensor it holds (all or some rows of)
    uint64_t offset = 0;  // of its bytes in the data section (an expert's: inside its stacked tensor)
    GgmlType type = GgmlType::F32;
    Shape shape;  // HF shape
    const uint8_t* bytes = nullptr;
    uint64_t nbytes = 0;
    std::vector<int64_t> row_order;  // GGUF row i is HF row row_order[i]; empty: in place
    std::vector<int64_t> col_order;  // GGUF column j is HF column col_order[j]; empty: in place
    std::vector<std::string> more;   // the entries of the tensor's other rows (in_proj_qkvz's attn_gate)
    MlaKvB mla{};  // heads > 0: MLA's kv_b_proj, this entry attn_v_b and "<name>#k_b" attn_k_b
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
    if (e.mla.heads) {
      const Entry& k = entries_.at(name + "#k_b");
      const MlaKvB& d = e.mla;
      std::vector<float> vb(size_t(d.heads * d.v * d.kv_lora)), kb(size_t(d.heads * d.kv_lora * d.nope));
      quant::ggml_dequantize(e.type, e.bytes, vb.data(), int64_t(vb.size()));
      quant::ggml_dequantize(k.type, k.bytes, kb.data(), int64_t(kb.size()));
      mla_kv_b_from_parts(d, kb.data(), vb.data(), out.f32());
      g_.file->release(k.bytes, size_t(k.nbytes));
    } else {
      place(e, out);
      for (const std::string& part : e.more) place(entries_.at(part), out);
    }
    g_.file->release(e.bytes, size_t(e.nbytes));
    gguf_tensor_values_back(name, out.f32(), n);
    const float* p = out.f32();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i]))
        fail(ErrorKind::InvalidInput, g_.path + ": tensor '" + e.info->name + "': non-finite value " +
                                          (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") + " at element " +
                                          std::to_string(i) + " of " + std::to_string(n));
    return out;
  }

 private:
  // An entry's values into the HF tensor: its rows where row_order puts them, its columns where col_order does.
  void place(const Entry& e, Tensor& out) const {
    const int64_t n = out.numel(), len = e.shape.size() == 1 ? 1 : e.shape.back();
    if (e.row_order.empty() && e.col_order.empty()) return quant::ggml_dequantize(e.type, e.bytes, out.f32(), n);
    const int64_t rows = e.row_order.empty() ? n / len : int64_t(e.row_order.size());
    std::vector<float> tmp(size_t(rows * len));
    quant::ggml_dequantize(e.type, e.bytes, tmp.data(), rows * len);
    if (&e != &entries_.at(e.hf)) g_.file->release(e.bytes, size_t(e.nbytes));
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = out.f32() + (e.row_order.empty() ? r : e.row_order[size_t(r)]) * len;
      const float* src = tmp.data() + r * len;
      if (e.col_order.empty()) std::memcpy(dst, src, size_t(len) * sizeof(float));
      else
        for (int64_t j = 0; j < len; ++j) dst[e.col_order[size_t(j)]] = src[j];
    }
  }

  GgufFile g_;
  std::map<std::string, Entry> entries_;  // by HF name
};

// HF names and shapes of the tensors the computation reads (each layer's table, model/block_tensors.h,
// by the names HfModel::load_block asks for).
std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& c, bool lm_head) {
  std::vector<std::pair<std::string, Shape>> out = {{"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}}};
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const BlockTensor& t : block_tensors(c, l, false))
      out.push_back({t.stored.empty() ? HfModel::layer_prefix(l) + t.name : t.stored, t.shape});
  out.push_back({"model.norm.weight", {c.hidden_size}});
  if (lm_head) out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
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

// The family a file reads back as, from general.architecture (a llama file with expert_count: Mixtral).
const ArchSpec& read_family(const GgufFile& g, const std::string& arch) {
  const ArchSpec* a = find_arch_for_gguf(arch, g.find(arch + ".expert_count") != nullptr);
  if (!a) a = find_arch_for_gguf(arch, g.find(arch + ".expert_count") == nullptr);
  if (!a)
    fail(ErrorKind::Unsupported,
         g.path + ": GGUF architecture '" + arch + "' is not supported (" + gguf_read_archs() + ")");
  return *a;
}

// The config.json fields every family reads (hidden size, layers, heads, context, epsilon, rope base,
// vocabulary, special tokens, tied embeddings).
nlohmann::json common_config(const GgufFile& g, const Keys& k, const std::map<std::string, const GgufTensorInfo*>& by_name) {
  nlohmann::json j;
  j["hidden_size"] = k.required_count("embedding_length");
  j["num_hidden_layers"] = k.required_count("block_count");
  j["intermediate_size"] = k.required_count("feed_forward_length");
  const int64_t heads = k.required_count("attention.head_count");
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = k.count("attention.head_count_kv").value_or(heads);
  j["max_position_embeddings"] = k.required_count("context_length");
  j["rms_norm_eps"] = k.positive("attention.layer_norm_rms_epsilon", std::nullopt);
  j["rope_theta"] = k.positive("rope.freq_base", 10000.0);
  const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
  if (tokens && tokens->type == GgufType::Array && tokens->elem == GgufType::String)
    j["vocab_size"] = int64_t(tokens->strs.size());
  else if (auto v = k.count("vocab_size"))
    j["vocab_size"] = *v;
  else if (auto e = by_name.find("token_embd.weight"); e != by_name.end() && e->second->dims.size() >= 2 &&
                                                          e->second->dims[1] >= 1 && e->second->dims[1] <= (1u << 30))
    j["vocab_size"] = int64_t(e->second->dims[1]);
  else
    fail(ErrorKind::InvalidInput,
         g.path + ": no vocabulary size (tokenizer.ggml.tokens, " + k.arch() + ".vocab_size or token_embd.weight)");
  if (j["vocab_size"].get<int64_t>() < 1) fail(ErrorKind::InvalidInput, g.path + ": the vocabulary is empty");
  // Every special-token id must name a token (an out-of-range bos was dropped before, which changed
  // what eval scores); llama.cpp's "none" (-1, 0xFFFFFFFF) leaves the id unset.
  g.check_token_ids(j["vocab_size"].get<int64_t>());
  for (const char* key : {"bos", "eos"})
    if (const int64_t id = g.token_id(std::string("tokenizer.ggml.") + key + "_token_id", j["vocab_size"]); id >= 0)
      j[std::string(key) + "_token_id"] = id;
  j["tie_word_embeddings"] = by_name.count("output.weight") == 0;
  return j;
}

ModelConfig gguf_config(const GgufFile& g, const std::map<std::string, const GgufTensorInfo*>& by_name) {
  const std::string arch = g.string("general.architecture", "");
  const ArchSpec& family = read_family(g, arch);
  const GgufArch& ga = *family.gguf;
  const Keys k(g, arch);
  const std::string s = g.string(arch + ".rope.scaling.type", "none");
  if ((s != "none" && !(ga.yarn && s == "yarn") && !(ga.linear_rope && s == "linear")) || by_name.count("rope_freqs.weight"))
    fail(ErrorKind::Unsupported, g.path + ": rope scaling ('" + (s != "none" ? s : std::string("rope_freqs.weight")) +
                                     "') is not supported when reading GGUF files of " + arch);
  nlohmann::json j = common_config(g, k, by_name);
  j["architectures"] = {family.name};
  if (ga.read_keys) ga.read_keys(k, j);
  else read_gqa_head_keys(k, j);
  ModelConfig c = parse_model_config(j, g.path + " (GGUF keys)");
  c.qkv_bias = by_name.count("blk.0.attn_q.bias") > 0;
  c.o_bias = by_name.count("blk.0.attn_output.bias") > 0;
  c.qk_norm = c.qk_norm || by_name.count("blk.0.attn_q_norm.weight") > 0;
  c.norm_unit_offset = false;  // llama.cpp's converter stores Gemma's norms as 1 + w
  if (c.embed_scale > 0) c.embed_scale = double(std::sqrt(float(c.hidden_size)));  // its graph: sqrtf(n_embd)
  return c;
}
// The GGUF tensor `want.name` checked for an HF tensor: present, a type we decode, ggml dims `want.dims`
// (trailing 1s allowed), rows of `cols` whole blocks, its bytes inside the data section; part `expert` of
// a stack of `experts`, or the whole tensor (expert -1) of `rows` rows.
struct Wanted {
  std::string name, hf;
  Shape shape;
  std::vector<uint64_t> dims;
};
GgufSource::Entry take(const GgufFile& g, const std::map<std::string, const GgufTensorInfo*>& by_name, const Wanted& w,
                       int64_t rows, int64_t cols, int64_t expert = -1, int64_t experts = 1) {
  auto it = by_name.find(w.name);
  if (it == by_name.end()) fail(ErrorKind::InvalidInput, g.path + ": tensor '" + w.name + "' is missing (" + w.hf + ")");
  const GgufTensorInfo& t = *it->second;
  auto bad = [&](ErrorKind kind, const std::string& why) { fail(kind, g.path + ": tensor '" + w.name + "' " + why); };
  if (!quant::ggml_type_known(t.type))
    bad(ErrorKind::Unsupported, "has ggml type " + std::to_string(t.type) +
                                    ", which is not decoded here (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, "
                                    "q3_k, q4_k, q5_k, q6_k, mxfp4)");
  std::vector<uint64_t> dims = t.dims;
  while (dims.size() > w.dims.size() && dims.back() == 1) dims.pop_back();
  if (dims != w.dims)
    bad(ErrorKind::InvalidInput, "has ggml dims " + dims_str(t.dims) + ", the model's keys imply " + dims_str(w.dims) +
                                     " (" + w.hf + " " + shape_str(w.shape) + ")");
  GgufSource::Entry e;
  e.info = &t;
  e.type = GgmlType(t.type);
  e.shape = w.shape;
  if (cols % quant::ggml_block_elems(e.type) != 0)
    bad(ErrorKind::InvalidInput, "is " + std::string(quant::ggml_type_name(e.type)) + " with rows of " +
                                     std::to_string(cols) + " elements, not a multiple of its block of " +
                                     std::to_string(quant::ggml_block_elems(e.type)));
  e.nbytes = uint64_t(rows) * uint64_t(quant::ggml_row_bytes(e.type, cols));  // < 2^60: shapes are limited
  if (expert >= 0) {  // the whole stack is checked against the file, then this expert's rows taken
    const uint8_t* all = g.tensor_data(t, e.nbytes * uint64_t(experts));
    e.bytes = all + e.nbytes * uint64_t(expert);
    e.offset = t.offset + e.nbytes * uint64_t(expert);
  } else {
    e.bytes = g.tensor_data(t, e.nbytes);
    e.offset = t.offset;
  }
  return e;
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
  auto& entries = src->entries();
  for (const auto& [hf, shape] : expected_tensors(cfg, !cfg.tie_word_embeddings)) {
    int64_t expert = -1;  // an expert's Linear: part `expert` of its layer's stacked tensor
    const std::string name = gguf_tensor_name(hf, cfg, &expert);
    const int64_t cols = shape.back(), E = cfg.moe.num_experts;
    if (cfg.is_mla() && is_mla_kv_b(hf)) {  // attn_v_b (the value rows) and attn_k_b (the key rows, transposed)
      const MlaKvB d = mla_kv_b_dims(cfg);
      const std::string k_name = gguf_mla_k_b_name(hf, cfg);
      GgufSource::Entry v = take(g, by_name, {name, hf, shape, {uint64_t(d.kv_lora), uint64_t(d.v), uint64_t(d.heads)}},
                                 d.heads * d.v, d.kv_lora);
      v.mla = d;
      entries[hf + "#k_b"] = take(g, by_name, {k_name, hf, shape, {uint64_t(d.nope), uint64_t(d.kv_lora), uint64_t(d.heads)}},
                                  d.heads * d.kv_lora, d.nope);
      entries[hf] = std::move(v);
      used.insert(name), used.insert(k_name);
      continue;
    }
    if (auto parts = gguf_tensor_parts(hf, cfg); !parts.empty()) {  // in_proj_qkvz: attn_qkv and attn_gate
      for (size_t i = 0; i < parts.size(); ++i) {
        const int64_t part_rows = int64_t(parts[i].rows.size());
        GgufSource::Entry e = take(g, by_name, {parts[i].gguf_name, hf, shape, {uint64_t(cols), uint64_t(part_rows)}},
                                   part_rows, cols);
        e.row_order = parts[i].rows;
        e.hf = hf;
        used.insert(parts[i].gguf_name);
        const std::string key = i ? hf + "#" + parts[i].gguf_name : hf;
        if (i) entries[hf].more.push_back(key);
        entries[key] = std::move(e);
      }
      continue;
    }
    std::vector<uint64_t> want;  // ggml order: ne0 = row length, unit dims dropped (a conv kernel [C, 1, K])
    for (auto d = shape.rbegin(); d != shape.rend(); ++d)
      if (*d > 1 || d == shape.rbegin()) want.push_back(uint64_t(*d));
    if (expert >= 0) want.push_back(uint64_t(E));
    GgufSource::Entry e = take(g, by_name, {name, hf, shape, want}, shape_numel(shape) / cols, cols, expert, E);
    e.row_order = gguf_tensor_row_order(hf, cfg);
    e.col_order = gguf_tensor_col_order(hf, cfg);
    e.hf = hf;
    used.insert(name);
    entries[hf] = std::move(e);
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
