// Size limits of a model configuration, checked before anything is allocated from it. Each bound is
// far above any released model of the supported architectures (largest today: hidden 16384,
// intermediate 53248, 126 layers, 128 heads, vocab 262144, context 1M) and low enough that no product
// of sizes used for an allocation overflows int64 or asks for more than ~1 TiB.
#include "core/error.h"
#include "model/config.h"

namespace ar {

namespace {
struct Limit {
  const char* field;
  int64_t ModelConfig::*value;
  int64_t max;
};

constexpr Limit kLimits[] = {
    {"hidden_size", &ModelConfig::hidden_size, int64_t(1) << 17},
    {"intermediate_size", &ModelConfig::intermediate_size, int64_t(1) << 20},
    {"num_hidden_layers", &ModelConfig::num_layers, int64_t(1) << 12},
    {"num_attention_heads", &ModelConfig::num_heads, int64_t(1) << 12},
    {"num_key_value_heads", &ModelConfig::num_kv_heads, int64_t(1) << 12},
    {"head_dim", &ModelConfig::head_dim, int64_t(1) << 12},
    {"vocab_size", &ModelConfig::vocab_size, int64_t(1) << 24},
    {"max_position_embeddings", &ModelConfig::max_position_embeddings, int64_t(1) << 24},
};

// Largest element count of one tensor derived from the config (2^36 fp32 = 256 GiB), and of the RoPE
// cos/sin tables every command builds for max_position_embeddings (2^32 floats = 16 GiB).
constexpr int64_t kMaxElements = int64_t(1) << 36, kMaxRopeElements = int64_t(1) << 32;

[[noreturn]] void too_large(const std::string& path, const std::string& field, const std::string& msg) {
  fail(ErrorKind::InvalidInput, path + ": field '" + field + "': " + msg);
}
}  // namespace

void check_dense_limit(const ModelConfig& c, int64_t tokens, const std::string& what) {
  if (c.dense_limit <= 0 || tokens <= c.dense_limit) return;
  fail(ErrorKind::Unsupported, what + " of " + std::to_string(tokens) + " tokens exceeds " + c.dense_limit_field + " " +
                                   std::to_string(c.dense_limit) + " of " + c.architecture +
                                   ": beyond it attention is not full causal attention, which is not supported");
}

void check_config_limits(const ModelConfig& c, const std::string& path) {
  for (const Limit& l : kLimits)
    if (c.*l.value > l.max)
      too_large(path, l.field, std::to_string(c.*l.value) + " exceeds the limit of " + std::to_string(l.max) +
                                   " (a model this size would need absurd memory)");
  if (c.num_kv_heads > c.num_heads)
    too_large(path, "num_key_value_heads", std::to_string(c.num_kv_heads) + " exceeds num_attention_heads " +
                                               std::to_string(c.num_heads));
  // Every product below is < 2^63 given the limits above (each factor <= 2^24).
  struct Product { const char* field; int64_t n, max; };
  const Product products[] = {
      {"vocab_size", c.vocab_size * c.hidden_size, kMaxElements},                        // embeddings, lm_head
      {"intermediate_size", c.intermediate_size * c.hidden_size, kMaxElements},          // MLP weights
      {"num_attention_heads", c.num_heads * c.head_dim * c.hidden_size, kMaxElements},   // q/o projections
      {"max_position_embeddings", c.max_position_embeddings * c.head_dim, kMaxRopeElements},  // RoPE tables
  };
  if (c.is_moe()) {
    struct MoeLimit { const char* field; int64_t v, max; };
    const MoeLimit moe[] = {{"num_experts", c.moe.num_experts, int64_t(1) << 12},
                            {"moe_intermediate_size", c.moe.expert_intermediate, int64_t(1) << 20},
                            {"shared_expert_intermediate_size", c.moe.shared_intermediate, int64_t(1) << 20}};
    for (const MoeLimit& l : moe)
      if (l.v > l.max) too_large(path, l.field, std::to_string(l.v) + " exceeds the limit of " + std::to_string(l.max));
    if (c.moe.num_experts * c.moe.expert_intermediate * c.hidden_size > kMaxElements)
      too_large(path, "num_experts", "implies a layer's experts of " +
                                         std::to_string(c.moe.num_experts * c.moe.expert_intermediate * c.hidden_size) +
                                         " elements, more than the limit of " + std::to_string(kMaxElements));
  }
  if (!c.delta_layers.empty()) {  // Gated DeltaNet: its heads, head sizes and conv taps
    struct DeltaLimit { const char* field; int64_t v, max; };
    const DeltaLimit delta[] = {{"linear_num_key_heads", c.delta.Hk, int64_t(1) << 12},
                                {"linear_num_value_heads", c.delta.Hv, int64_t(1) << 12},
                                {"linear_key_head_dim", c.delta.Dk, int64_t(1) << 12},
                                {"linear_value_head_dim", c.delta.Dv, int64_t(1) << 12},
                                {"linear_conv_kernel_dim", c.delta.K, int64_t(1) << 8}};
    for (const DeltaLimit& l : delta)
      if (l.v > l.max) too_large(path, l.field, std::to_string(l.v) + " exceeds the limit of " + std::to_string(l.max));
    if (c.delta.conv_dim() * c.hidden_size > kMaxElements || c.delta.Hv * c.delta.Dk * c.delta.Dv > kMaxElements)
      too_large(path, "linear_num_value_heads", "implies a linear-attention projection or state of more than " +
                                                    std::to_string(kMaxElements) + " elements");
  }
  for (const Product& p : products)
    if (p.n > p.max)
      too_large(path, p.field, "implies a tensor of " + std::to_string(p.n) + " elements, more than the limit of " +
                                   std::to_string(p.max));
}

}  // namespace ar
