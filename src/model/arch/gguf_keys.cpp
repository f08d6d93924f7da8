// The GGUF key helpers of the family rows (gguf_arch.h).
#include <algorithm>

#include "core/error.h"
#include "model/arch/gguf_arch.h"

namespace ar {

void set_gguf_key(std::vector<GgufKey>& keys, const std::string& key, GgufKeyValue v) {
  auto it = std::find_if(keys.begin(), keys.end(), [&](const GgufKey& k) { return k.key == key; });
  if (it == keys.end()) keys.push_back({key, std::move(v)});
  else it->value = std::move(v);
}

void set_gguf_count(std::vector<GgufKey>& keys, const std::string& key, int64_t v) {
  if (v < 0 || v > int64_t(UINT32_MAX))
    fail(ErrorKind::InvalidInput, "GGUF export: " + key + " = " + std::to_string(v) + " does not fit u32");
  set_gguf_key(keys, key, uint32_t(v));
}

void refuse_gguf(const ModelConfig& cfg, const std::string& arch, const std::string& why) {
  fail(ErrorKind::Unsupported,
       "GGUF export: " + cfg.architecture + " " + why + ", which llama.cpp's " + arch + " does not run");
}

void read_gqa_head_keys(const GgufKeyReader& k, nlohmann::json& j) {
  if (auto d = k.count("attention.key_length")) j["head_dim"] = *d;
  const int64_t head_dim = j.contains("head_dim") ? j["head_dim"].get<int64_t>()
                                                  : j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>();
  for (const char* key : {"attention.value_length", "rope.dimension_count"})
    if (auto v = k.count(key); v && *v != head_dim)
      k.unsupported(key, "= " + std::to_string(*v) + " differs from the head size " + std::to_string(head_dim) +
                             " (not supported)");
}

void read_partial_rope_head_keys(const GgufKeyReader& k, nlohmann::json& j) {
  const int64_t heads = j["num_attention_heads"].get<int64_t>();
  const int64_t d = k.count("attention.key_length").value_or(j["hidden_size"].get<int64_t>() / heads);
  if (k.count("attention.value_length").value_or(d) != d) k.unsupported("attention.value_length", "differs from key_length (not supported)");
  const int64_t rope = k.count("rope.dimension_count").value_or(d);
  if (rope > d) k.bad("rope.dimension_count", "exceeds the head size " + std::to_string(d));
  j["head_dim"] = d;
  j["partial_rotary_factor"] = double(rope) / double(d);
}

}  // namespace ar
