// A family's GGUF description (docs/gguf.md): what llama.cpp calls it, what its graph can run, its
// hyperparameter keys beyond the common ones and how they read back into config.json fields. Each family's
// file in this folder defines its row; export/gguf_model.cpp writes files with it and model/gguf_source.cpp
// reads them back. Tensor names are llama.cpp's common ones (export/gguf_model.cpp), plus a family's
// renames.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "model/config.h"

namespace ar {

// A hyperparameter key without its "<arch>." prefix and its value in the GGUF type llama.cpp reads (a
// bool array: one flag per layer, attention.sliding_window_pattern).
// An int32 array: rope.dimension_sections.
using GgufKeyValue = std::variant<uint32_t, float, bool, std::string, std::vector<bool>, std::vector<int32_t>>;
struct GgufKey {
  std::string key;
  GgufKeyValue value;
};
// Sets `key` (in place when it is already listed, so the file keeps the common keys' order); a count
// that does not fit u32 is refused naming the key.
void set_gguf_count(std::vector<GgufKey>& keys, const std::string& key, int64_t v);
void set_gguf_key(std::vector<GgufKey>& keys, const std::string& key, GgufKeyValue v);

// A GGUF file's keys as a family reads them back, the file and key named in errors.
class GgufKeyReader {
 public:
  virtual ~GgufKeyReader() = default;
  virtual const std::string& arch() const = 0;  // "deepseek2": keys are "<arch>.<key>"
  virtual std::optional<int64_t> count(const std::string& key) const = 0;    // a positive integer
  virtual std::optional<int64_t> natural(const std::string& key) const = 0;  // a non-negative integer
  // A finite number; an f32 at its shortest decimal (1e-5f -> 1e-5), the value the converter started from.
  virtual std::optional<double> number(const std::string& key) const = 0;
  virtual std::optional<bool> flag(const std::string& key) const = 0;
  virtual std::optional<std::string> text(const std::string& key) const = 0;
  virtual std::optional<std::vector<bool>> flags(const std::string& key) const = 0;  // a bool array
  // Whether the key is present, whatever its type.
  virtual bool has(const std::string& key) const = 0;
  // "<file>: key '<arch>.<key>' <why>": InvalidInput (bad) or Unsupported (unsupported).
  [[noreturn]] virtual void bad(const std::string& key, const std::string& why) const = 0;
  [[noreturn]] virtual void unsupported(const std::string& key, const std::string& why) const = 0;
  int64_t required_count(const std::string& key) const {
    const std::optional<int64_t> v = count(key);
    if (!v) bad(key, "is missing");
    return *v;
  }
};

// An in-layer tensor named otherwise than the common table (GLM-4.5's pre-feed-forward norm).
struct GgufRename {
  const char* hf;    // "post_attention_layernorm.weight"
  const char* gguf;  // "post_attention_norm.weight"
};

enum class GgufReadAs { Never, Dense, Moe };  // which files of its llama.cpp architecture read back as this family
enum class GgufTopkNorm { Never, Always, FromKey };  // llama.cpp's renormalization of the top-k weights

struct GgufArch {
  const char* name;  // llama.cpp's architecture ("llama", "deepseek2")
  GgufReadAs read_as = GgufReadAs::Dense;
  bool permute_qk = false;  // "llama": Q/K rows interleaved for its adjacent-pair RoPE
  GgufTopkNorm topk_norm = GgufTopkNorm::FromKey;
  bool leading_dense = false;  // dense layers allowed, as the first leading_dense_block_count
  bool yarn = false;           // YaRN RoPE scaling, written and read as keys by write_keys / read_keys
  bool linear_rope = false;    // linear RoPE scaling, likewise (Gemma 3's global layers)
  // Gated DeltaNet's value heads in llama.cpp's tiled order (qwen35, qwen35moe: export/gguf_delta_net.h)
  bool v_heads_tiled = false;
  std::span<const GgufRename> renames = {};
  // Refuses (Unsupported, naming the field) what llama.cpp's graph does not run; may be null.
  void (*check)(const ModelConfig& cfg) = nullptr;
  // Adds or replaces keys after the common ones (export/gguf_model.cpp lists those); may be null.
  void (*write_keys)(const ModelConfig& cfg, std::vector<GgufKey>& keys) = nullptr;
  // The family's config.json fields from the keys, after the common ones (hidden size, layers, heads,
  // context, epsilon, rope base, vocabulary); null: the head keys as grouped-query attention reads them.
  void (*read_keys)(const GgufKeyReader& k, nlohmann::json& j) = nullptr;
};

// Refuses (Unsupported) a model llama.cpp's `arch` graph does not run: "GGUF export: <architecture> <why>,
// which llama.cpp's <arch> does not run".
[[noreturn]] void refuse_gguf(const ModelConfig& cfg, const std::string& arch, const std::string& why);

// Grouped-query attention's head keys read back: head_dim from attention.key_length, which
// attention.value_length and rope.dimension_count must equal (whole-head RoPE).
void read_gqa_head_keys(const GgufKeyReader& k, nlohmann::json& j);
// The same with partial RoPE (glm4moe, qwen3next, qwen35): head_dim from attention.key_length (else
// hidden / heads), attention.value_length equal to it, partial_rotary_factor = rope.dimension_count / head_dim.
void read_partial_rope_head_keys(const GgufKeyReader& k, nlohmann::json& j);

// The sigmoid-router MoE keys of deepseek2 and glm4moe (arch/sigmoid_moe.cpp), both ways. Reading,
// expert_gating_func must say sigmoid (2); `sigmoid_by_default`: its absence does too (glm4moe).
void write_sigmoid_moe_keys(const ModelConfig& cfg, std::vector<GgufKey>& keys);
void read_sigmoid_moe_keys(const GgufKeyReader& k, nlohmann::json& j, bool sigmoid_by_default);

}  // namespace ar
