// The config.json fields every mixture-of-experts family shares: expert count, top-k, the experts'
// intermediate size, and which layers are MoE. Each is checked naming the field.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
int64_t positive(const JsonIn& in, const char* key) {
  const int64_t v = in.at(key).i64();
  if (v <= 0) in.at(key).bad("must be a positive integer");
  return v;
}
}  // namespace

int64_t positive_or(const JsonIn& in, const char* key, int64_t def) {
  if (!in.has(key)) return def;
  const int64_t v = in.at(key).i64();
  if (v <= 0) in.at(key).bad("must be a positive integer");
  return v;
}

bool null_field(const nlohmann::json& j, const char* key) { return j.contains(key) && j[key].is_null(); }

void configure_moe(ModelConfig& cfg, const nlohmann::json& j, const std::string& path, const MoeFields& f) {
  const JsonIn in(j, path);
  MoeConfig& m = cfg.moe;
  // The expert count under its own name or transformers' alias (attribute_map: Qwen3-MoE configs saved
  // by transformers 5 say num_local_experts); both present must agree.
  const char* experts = f.alias && in.has(f.alias) && !in.has(f.experts) ? f.alias : f.experts;
  m.num_experts = positive(in, experts);
  if (f.alias && experts == f.experts && in.has(f.alias) && positive(in, f.alias) != m.num_experts)
    in.at(f.alias).bad(std::to_string(positive(in, f.alias)) + " contradicts " + f.experts + " " +
                       std::to_string(m.num_experts));
  m.top_k = positive(in, "num_experts_per_tok");
  if (m.top_k > m.num_experts)
    in.at("num_experts_per_tok").bad(std::to_string(m.top_k) + " exceeds " + experts + " " + std::to_string(m.num_experts));
  m.expert_intermediate = positive(in, f.intermediate);
  if (f.shared_intermediate && in.has(f.shared_intermediate)) m.shared_intermediate = positive(in, f.shared_intermediate);
  m.norm_topk_prob = f.always_norm_topk || in.boolean("norm_topk_prob", false);
  if (in.has("decoder_sparse_step")) m.sparse_step = positive(in, "decoder_sparse_step");
  if (in.has("mlp_only_layers"))
    for (const JsonIn& e : in.at("mlp_only_layers").elements()) {
      const int64_t l = e.i64();
      if (l < 0 || l >= cfg.num_layers)
        in.at("mlp_only_layers").bad("layer " + std::to_string(l) + " is outside 0.." + std::to_string(cfg.num_layers - 1));
      m.mlp_only_layers.push_back(l);
    }
  if (in.has("router_jitter_noise") && in.at("router_jitter_noise").num() != 0)
    in.at("router_jitter_noise").bad("only 0 is supported (jitter is a training-time perturbation)");
  if (in.boolean("output_router_logits", false)) in.at("output_router_logits").bad("true is not supported");
}


void read_qwen_moe_keys(const GgufKeyReader& k, nlohmann::json& j, bool norm_topk) {
  read_gqa_head_keys(k, j);
  j["num_experts"] = k.required_count("expert_count");
  j["num_experts_per_tok"] = k.required_count("expert_used_count");
  j["moe_intermediate_size"] = k.required_count("expert_feed_forward_length");
  j["norm_topk_prob"] = norm_topk;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array();
}
}  // namespace ar
