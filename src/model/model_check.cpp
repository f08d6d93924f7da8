// Whole-model validation done once when a model directory is opened, before any command works on it:
// every tensor the computation will read is present, has the shape config.json implies and a dtype
// that fits its role and holds no NaN/Inf (an integer scan of the stored bytes, no conversion); no
// tensor name is held by two shards; the tokenizer's ids fit the embeddings.
#include <cstring>
#include <set>

#include "core/error.h"
#include "model/loader.h"
#include "model/block_tensors.h"
#include "model/dequant_float.h"
#include "model/moe_names.h"

namespace ar {

namespace {
enum class Role { Norm, Embedding, Linear, Bias, LmHead, Experts, Mxfp4Experts };

struct Expected {
  std::string name;
  Shape shape;
  Role role;
};

const char* role_name(Role r) {
  switch (r) {
    case Role::Norm: return "a norm weight";
    case Role::Embedding: return "the embedding table";
    case Role::Linear: return "a Linear weight";
    case Role::Bias: return "a bias";
    case Role::LmHead: return "lm_head";
    case Role::Experts: return "a fused expert tensor";
    case Role::Mxfp4Experts: return "MXFP4 experts";
  }
  return "a weight";
}

// The layer's table (model/block_tensors.h) as the checkpoint stores it: a fused expert tensor once.
void add_block(std::vector<Expected>& out, const HfModel& m, int64_t layer) {
  const ModelConfig& c = m.config();
  const std::string p = HfModel::layer_prefix(layer);
  const bool fused = c.is_moe_layer(layer) && m.fused_experts(layer);
  std::set<std::string> fused_seen;
  for (const BlockTensor& t : block_tensors(c, layer, fused)) {
    if (t.offset >= 0) {
      const bool mxfp4 = c.quant.mxfp4_experts && t.role == TensorRole::Linear;  // gpt-oss's release
      if (fused_seen.insert(t.stored).second)
        out.push_back({t.stored, t.stored_shape, mxfp4 ? Role::Mxfp4Experts : Role::Experts});
      continue;
    }
    const Role role = t.role == TensorRole::Norm || t.role == TensorRole::Buffer ? Role::Norm
                      : t.role == TensorRole::Bias                                ? Role::Bias
                                                                                  : Role::Linear;
    out.push_back({t.stored.empty() ? p + t.name : t.stored, t.shape, role});
  }
}

// The tensors load_embeddings/load_block/load_final_norm/load_lm_head read, as load_block names them.
std::vector<Expected> expected_tensors(const HfModel& m, bool has_lm_head) {
  const ModelConfig& c = m.config();
  std::vector<Expected> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, Role::Embedding});
  for (int64_t l = 0; l < c.num_layers; ++l) add_block(out, m, l);
  out.push_back({"model.norm.weight", {c.hidden_size}, Role::Norm});
  if (!c.tie_word_embeddings || has_lm_head)
    out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, Role::LmHead});
  return out;
}

// The block index of a stored "model.layers.<i>.<rest>" name, or -1 for any other name.
int64_t stored_layer(const std::string& name) {
  static constexpr char kPrefix[] = "model.layers.";
  const size_t n = sizeof kPrefix - 1;
  if (name.compare(0, n, kPrefix) != 0) return -1;
  size_t i = n;
  int64_t layer = 0;
  for (; i < name.size() && i < n + 9 && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
  return i > n && i < name.size() && name[i] == '.' ? layer : -1;
}

// The expert index of a stored per-expert name "model.layers.<l>.mlp.experts.<e>.<rest>" (Mixtral:
// block_sparse_moe.experts.<e>.), with its layer; {-1, -1} for any other name.
std::pair<int64_t, int64_t> stored_expert(const std::string& name) {
  const int64_t layer = stored_layer(name);
  if (layer < 0) return {-1, -1};
  const size_t after = HfModel::layer_prefix(layer).size();
  for (const char* module : {"mlp.experts.", "block_sparse_moe.experts."}) {
    const size_t n = std::strlen(module);
    if (name.compare(after, n, module) != 0) continue;
    size_t i = after + n;
    int64_t expert = 0;
    for (; i < name.size() && i < after + n + 9 && name[i] >= '0' && name[i] <= '9'; ++i)
      expert = expert * 10 + (name[i] - '0');
    if (i > after + n && i < name.size() && name[i] == '.') return {layer, expert};
  }
  return {-1, -1};
}

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

const std::string kWeight = ".weight";
}  // namespace

const StTensorInfo* HfModel::info(const std::string& name, std::string* file) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  if (file) *file = shards_[it->second.shard]->path();
  return shards_[it->second.shard]->find(it->second.name);
}

// A packed Linear ("<prefix>.qweight" with qzeros and scales) in a quantized model: integer codes,
// floating-point scales. Shapes are checked when it is dequantized.
bool HfModel::check_packed(const std::string& weight_name) const {
  if (!cfg_.quant.present || weight_name.size() <= kWeight.size()) return false;
  const std::string prefix = weight_name.substr(0, weight_name.size() - kWeight.size());
  if (!has(prefix + ".qweight")) return false;
  for (const char* part : {".qweight", ".qzeros", ".scales"}) {
    std::string file;
    const StTensorInfo* t = info(prefix + part, &file);
    if (!t) fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + prefix + part + "' is missing");
    const bool ok = std::string(part) == ".scales" ? is_float(t->dtype) : t->dtype == DType::I32;
    if (!ok)
      fail(ErrorKind::InvalidInput, file + ": tensor '" + prefix + part + "' has dtype " +
                                        dtype_safetensors_name(t->dtype) + "; a packed Linear's " + (part + 1) +
                                        " must be " + (std::string(part) == ".scales" ? "F32, BF16 or F16" : "I32"));
  }
  return true;
}

// Blocks stored past num_hidden_layers: a config.json that lists fewer layers than the checkpoint
// holds would run a truncated model and report a plausible but wrong perplexity. Names of blocks below
// the count that the computation does not read (rotary inv_freq buffers, ...) stay accepted.
void HfModel::check_layer_count() const {
  const std::string* first = nullptr;
  int64_t first_layer = 0;
  for (const auto& [name, shard] : where_) {
    const int64_t l = stored_layer(name);
    if (l < cfg_.num_layers + cfg_.mtp_layers || (first && l >= first_layer)) continue;
    first = &name;
    first_layer = l;
  }
  if (first)
    fail(ErrorKind::InvalidInput, shards_[where_.at(*first).shard]->path() + ": tensor '" + where_.at(*first).name +
                                      "' is stored but config.json says num_hidden_layers " +
                                      std::to_string(cfg_.num_layers) +
                                      (cfg_.mtp_layers ? std::string(" (+ ") + std::to_string(cfg_.mtp_layers) + " MTP)" : ""));
}

// Per-expert tensors the computation would not read: an expert past the config's count, one in a layer
// the config makes dense, or one beside the fused tensors of its layer (both layouts in one layer: the
// loader would read the fused ones and ignore the rest, a plausible but wrong model).
void HfModel::check_expert_tensors() const {
  for (const auto& [name, at] : where_) {
    const auto [layer, expert] = stored_expert(name);
    if (layer < 0 || layer >= cfg_.num_layers) continue;
    const std::string& file = shards_[at.shard]->path();
    const std::string stored = file + ": tensor '" + at.name + "'";
    if (!cfg_.is_moe_layer(layer))
      fail(ErrorKind::InvalidInput, stored + " is an expert's, but config.json makes layer " + std::to_string(layer) +
                                        " a dense feed-forward" + (cfg_.is_moe() ? " (mlp_only_layers, decoder_sparse_step)" : ""));
    if (expert >= cfg_.moe.num_experts)
      fail(ErrorKind::InvalidInput, stored + " is expert " + std::to_string(expert) + ", but config.json says " +
                                        std::to_string(cfg_.moe.num_experts) + " experts (0.." +
                                        std::to_string(cfg_.moe.num_experts - 1) + ")");
    if (fused_experts(layer))
      fail(ErrorKind::InvalidInput, stored + " and the fused '" + fused_experts_name(layer, ExpertProj::Gate) +
                                        "' both hold layer " + std::to_string(layer) +
                                        "'s experts: which one is the model is ambiguous (keep one layout)");
  }
}

void HfModel::check_tensors() const {
  check_layer_count();
  check_expert_tensors();
  const bool has_lm_head = has("lm_head.weight") || has("lm_head.qweight") || has("lm_head.weight_packed");
  if (!cfg_.tie_word_embeddings && !has_lm_head)
    fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + names_.stored("lm_head.weight") +
                                      "' is missing and tie_word_embeddings is false");
  for (const Expected& e : expected_tensors(*this, has_lm_head)) {
    if (e.role == Role::Mxfp4Experts) {
      check_mxfp4_experts(e.name, e.shape);
      continue;
    }
    if ((e.role == Role::Linear || e.role == Role::LmHead) && e.name.size() > kWeight.size() &&
        check_float_linear(*this, e.name.substr(0, e.name.size() - kWeight.size()), e.shape))
      continue;
    if ((e.role == Role::Linear || e.role == Role::LmHead) && !has(e.name) && check_packed(e.name)) continue;
    std::string file;
    const StTensorInfo* t = info(e.name, &file);
    if (!t) fail(ErrorKind::InvalidInput, dir_ + ": tensor '" + names_.stored(e.name) + "' is missing");
    if (!is_float(t->dtype))
      fail(ErrorKind::InvalidInput, file + ": tensor '" + t->name + "' has dtype " + dtype_safetensors_name(t->dtype) +
                                        "; " + role_name(e.role) + " must be floating point (F32, BF16 or F16)");
    if (t->shape != e.shape)
      fail(ErrorKind::InvalidInput, file + ": tensor '" + t->name + "' has shape " + shape_str(t->shape) +
                                        ", config.json implies " + shape_str(e.shape));
  }
}

void HfModel::check_values() const {
  const bool has_lm_head = has("lm_head.weight");
  for (const Expected& e : expected_tensors(*this, has_lm_head)) {
    auto it = where_.find(e.name);
    if (it == where_.end()) continue;  // packed Linear: integer codes; its scales are checked on load
    const auto& shard = *shards_[it->second.shard];
    shard.check_finite_stored(*shard.find(it->second.name));
  }
}

void HfModel::check_unique_across_shards() const {
  std::map<std::string, size_t> first;
  for (size_t s = 0; s < shards_.size(); ++s)
    for (const auto& t : shards_[s]->header().tensors) {
      auto [it, fresh] = first.emplace(t.name, s);
      if (!fresh)
        fail(ErrorKind::InvalidInput, shards_[s]->path() + ": tensor '" + t.name + "' is also in " +
                                          shards_[it->second]->path());
    }
}

std::unique_ptr<Tokenizer> load_tokenizer(const HfModel& model) {
  auto tok = load_tokenizer(model.dir());
  const int64_t n = tok->vocab_size(), v = model.config().vocab_size;
  if (n > v)
    fail(ErrorKind::InvalidInput, model.dir() + ": the tokenizer has " + std::to_string(n) + " tokens (ids up to " +
                                      std::to_string(n - 1) + ") but config.json vocab_size is " + std::to_string(v) +
                                      ": its ids would index past the embedding table");
  for (int64_t id : {int64_t(tok->bos()), int64_t(tok->eos())})
    if (id >= v)
      fail(ErrorKind::InvalidInput, model.dir() + ": the tokenizer's special token id " + std::to_string(id) +
                                        " is not below config.json vocab_size " + std::to_string(v));
  return tok;
}

void require_context(const HfModel& model, int64_t tokens, const std::string& what) {
  check_dense_limit(model.config(), tokens, what);
  const int64_t have = model.config().max_position_embeddings;
  if (tokens > have)
    fail(ErrorKind::InvalidInput, model.context_field() + " " + std::to_string(have) + " is smaller than the " +
                                      std::to_string(tokens) + " tokens " + what + " needs");
}

}  // namespace ar
