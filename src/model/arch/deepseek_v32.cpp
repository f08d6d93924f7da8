// DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3's model (arch/deepseek_v3.cpp: latent attention
// with q_lora, the sigmoid-routed MoE) plus DeepSeek Sparse Attention's indexer in every layer
// (self_attn.indexer.wq_b / wk / k_norm / weights_proj: index_n_heads heads of index_head_dim), which lets
// each query attend to its index_topk best-scored tokens only. Up to index_topk tokens it selects every
// token, so the attention is V3's dense one: such sequences run exactly, with the indexer's tensors kept
// in 16 bit and copied unchanged; a longer sequence (a --seqlen, an eval window) is refused
// (ModelConfig::dense_limit). mlp_layer_types, when given, must be first_k_dense_replace's pattern.
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
// transformers' default: the first first_k_dense_replace layers "dense", the rest "sparse".
void check_mlp_layer_types(const ModelConfig& cfg, const JsonIn& in) {
  if (!in.has("mlp_layer_types") || in.at("mlp_layer_types").is_null()) return;
  const JsonIn types = in.at("mlp_layer_types");
  if (!types.is_array() || int64_t(types.size()) < cfg.num_layers)
    types.bad("must list 'dense' or 'sparse' for each of the " + std::to_string(cfg.num_layers) + " layers");
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string want = l < cfg.moe.first_dense ? "dense" : "sparse";
    if (types.at(size_t(l)).str() != want)
      types.bad("layer " + std::to_string(l) + " is '" + types.at(size_t(l)).str() + "'; only the first " +
                "first_k_dense_replace layers dense, the rest sparse, is supported");
  }
}
}  // namespace

void configure_deepseek_v32(ModelConfig& cfg, const nlohmann::json& j, const std::string& path) {
  const JsonIn in(j, path);
  configure_mla(cfg, j, in);
  if (cfg.mla.q_lora_rank == 0) in.at("q_lora_rank").bad("is required: DeepSeek-V3.2's indexer reads the q_lora latent");
  MlaConfig& m = cfg.mla;
  m.indexer_heads = positive_or(in, "index_n_heads", 64);
  m.indexer_head_dim = positive_or(in, "index_head_dim", 128);
  if (m.indexer_heads > 4096) in.at("index_n_heads").bad("exceeds the limit of 4096");
  if (m.indexer_head_dim > 65536) in.at("index_head_dim").bad("exceeds the limit of 65536");
  cfg.dense_limit = positive_or(in, "index_topk", 2048);
  cfg.dense_limit_field = "index_topk";
  configure_sigmoid_moe(cfg, j, path, {8, 4, 3, 1, 2.5});
  check_mlp_layer_types(cfg, in);
}

}  // namespace ar
