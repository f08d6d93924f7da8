#include "model/block_tensors.h"

#include "model/loader.h"
#include "model/moe_names.h"

namespace ar {

namespace {

using W = BlockWeights;

struct Table {
  std::vector<BlockTensor> front, linears, kept;  // norms/biases/buffers, Linears, 16-bit Linears

  void norm(std::string name, int64_t n, Tensor W::* f) { front.push_back({std::move(name), {n}, TensorRole::Norm, f}); }
  void bias(std::string name, int64_t n, Tensor W::* f) { front.push_back({std::move(name), {n}, TensorRole::Bias, f}); }
  void linear(std::string name, int64_t out, int64_t in, Tensor W::* f) {
    linears.push_back({std::move(name), {out, in}, TensorRole::Linear, f});
  }
  std::vector<BlockTensor> done() {
    front.insert(front.end(), linears.begin(), linears.end());
    front.insert(front.end(), kept.begin(), kept.end());
    return std::move(front);
  }
};

void gqa(Table& t, const ModelConfig& c) {
  const int64_t C = c.hidden_size, QD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
  if (c.qk_norm) {
    t.norm("self_attn.q_norm.weight", c.head_dim, &W::q_norm);
    t.norm("self_attn.k_norm.weight", c.head_dim, &W::k_norm);
  }
  if (c.qkv_bias) {
    t.bias("self_attn.q_proj.bias", c.attn_out_gate ? 2 * QD : QD, &W::bq);
    t.bias("self_attn.k_proj.bias", KD, &W::bk);
    t.bias("self_attn.v_proj.bias", KD, &W::bv);
  }
  if (c.o_bias) t.bias("self_attn.o_proj.bias", C, &W::bo);
  if (c.attn_sinks) t.front.push_back({"self_attn.sinks", {c.num_heads}, TensorRole::Buffer, &W::sinks});
  t.linear("self_attn.q_proj.weight", c.attn_out_gate ? 2 * QD : QD, C, &W::wq);  // + the output gate
  t.linear("self_attn.k_proj.weight", KD, C, &W::wk);
  t.linear("self_attn.v_proj.weight", KD, C, &W::wv);
  t.linear("self_attn.o_proj.weight", C, QD, &W::wo);
}

// DeepSeek-V3.2's sparse-attention indexer: its Linears kept in 16 bit, its LayerNorm copied; no module
// reads them (sequences stay within index_topk, where it selects every token: model/arch/deepseek_v32.cpp).
void indexer(Table& t, const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t C = c.hidden_size, Hi = m.indexer_heads, Di = m.indexer_head_dim;
  int64_t n = 0;
  const auto carry = [&](const std::string& name, Shape shape, TensorRole role) {
    BlockTensor x{"self_attn.indexer." + name, std::move(shape), role, nullptr, &W::carried, n++};
    x.why = "DeepSeek-V3.2's sparse-attention indexer";
    (role == TensorRole::Kept ? t.kept : t.front).push_back(std::move(x));
  };
  carry("k_norm.weight", {Di}, TensorRole::Buffer);
  carry("k_norm.bias", {Di}, TensorRole::Buffer);
  carry("wq_b.weight", {Hi * Di, m.q_lora_rank}, TensorRole::Kept);
  carry("wk.weight", {Di, C}, TensorRole::Kept);
  carry("weights_proj.weight", {Hi, C}, TensorRole::Kept);
}

void mla(Table& t, const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t C = c.hidden_size, H = c.num_heads, Dq = m.qk_nope_head_dim + m.qk_rope_head_dim;
  if (m.q_lora_rank) t.norm("self_attn.q_a_layernorm.weight", m.q_lora_rank, &W::q_a_norm);
  t.norm("self_attn.kv_a_layernorm.weight", m.kv_lora_rank, &W::kv_a_norm);
  if (c.o_bias) t.bias("self_attn.o_proj.bias", C, &W::bo);
  if (m.q_lora_rank) {
    t.linear("self_attn.q_a_proj.weight", m.q_lora_rank, C, &W::q_a);
    t.linear("self_attn.q_b_proj.weight", H * Dq, m.q_lora_rank, &W::q_b);
  } else {
    t.linear("self_attn.q_proj.weight", H * Dq, C, &W::wq);
  }
  t.linear("self_attn.kv_a_proj_with_mqa.weight", m.kv_lora_rank + m.qk_rope_head_dim, C, &W::kv_a);
  t.linear("self_attn.kv_b_proj.weight", H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, &W::kv_b);
  t.linear("self_attn.o_proj.weight", C, H * m.v_head_dim, &W::wo);
  if (m.indexer_heads) indexer(t, c);
}

// Gated DeltaNet (Qwen3-Next, Qwen3.5): the conv kernel [conv_dim, 1, K], dt_bias and A_log [Hv], the gated
// norm (applied as w, never 1 + w), in_proj_qkvz and out_proj quantized, in_proj_ba kept in 16 bit
// (model/attention_delta.h says why); Qwen3.5's split projections: in_proj_qkv, in_proj_z and out_proj
// quantized, in_proj_b and in_proj_a kept.
void delta_net(Table& t, const ModelConfig& c) {
  const DeltaDims& s = c.delta;
  const int64_t C = c.hidden_size, G = s.Hv / s.Hk;
  t.front.push_back({"linear_attn.conv1d.weight", {s.conv_dim(), 1, s.K}, TensorRole::Buffer, &W::conv});
  t.front.push_back({"linear_attn.dt_bias", {s.Hv}, TensorRole::Buffer, &W::dt_bias});
  t.front.push_back({"linear_attn.A_log", {s.Hv}, TensorRole::Buffer, &W::A_log});
  t.norm("linear_attn.norm.weight", s.Dv, &W::dnorm);
  t.front.back().unit_offset = false;
  const auto kept = [&](const char* name, int64_t rows, Tensor W::* f) {
    t.kept.push_back({name, {rows, C}, TensorRole::Kept, f});
    t.kept.back().why = "Gated DeltaNet's in_proj_ba";
  };
  if (s.split) {
    t.linear("linear_attn.in_proj_qkv.weight", s.conv_dim(), C, &W::in_qkvz);
    t.linear("linear_attn.in_proj_z.weight", s.value_dim(), C, &W::in_z);
    t.linear("linear_attn.out_proj.weight", C, s.value_dim(), &W::wo);
    kept("linear_attn.in_proj_b.weight", s.Hv, &W::in_b);
    kept("linear_attn.in_proj_a.weight", s.Hv, &W::in_a);
    return;
  }
  t.linear("linear_attn.in_proj_qkvz.weight", s.Hk * (2 * s.Dk + 2 * G * s.Dv), C, &W::in_qkvz);
  t.linear("linear_attn.out_proj.weight", C, s.value_dim(), &W::wo);
  kept("linear_attn.in_proj_ba.weight", 2 * s.Hv, &W::in_ba);
}

void mlp(Table& t, const ModelConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  t.linear("mlp.gate_proj.weight", I, C, &W::wg);
  t.linear("mlp.up_proj.weight", I, C, &W::wu);
  t.linear("mlp.down_proj.weight", C, I, &W::wd);
}

// One routed expert's Linear (and with gpt-oss its bias) in the checkpoint's layout (model/moe_names.h):
// per expert, transformers 5's fused [E, 2I, C] / [E, C, I], or gpt-oss's fused [E, C, 2I] / [E, I, C]
// (transposed, gate and up interleaved) with the biases [E, 2I] / [E, C].
void expert(Table& t, const ModelConfig& c, int64_t layer, bool fused, int64_t e, ExpertProj proj) {
  const MoeConfig& m = c.moe;
  const int64_t C = c.hidden_size, E = m.num_experts, I = m.expert_intermediate;
  const bool dn = proj == ExpertProj::Down;
  const int j = proj == ExpertProj::Gate ? 0 : proj == ExpertProj::Up ? 1 : 2;
  std::vector<Tensor> W::* lists[3] = {&W::eg, &W::eu, &W::ed};
  std::vector<Tensor> W::* biases[3] = {&W::ebg, &W::ebu, &W::ebd};
  const std::string module = expert_linear_name(m.mixtral_names, e, proj);
  BlockTensor x{module + ".weight", dn ? Shape{C, I} : Shape{I, C}, TensorRole::Linear, nullptr, lists[j], e};
  BlockTensor b{module + ".bias", {dn ? C : I}, TensorRole::Bias, nullptr, biases[j], e};
  if (!fused) {
    x.stored = expert_weight_name(c, layer, e, proj);
  } else if (!m.gpt_oss) {
    x.stored = fused_experts_name(layer, proj);
    x.offset = dn ? e * C * I : e * 2 * I * C + (j == 1 ? I * C : 0);
    x.stored_shape = dn ? Shape{E, C, I} : Shape{E, 2 * I, C};
  } else {
    x.stored = fused_experts_name(layer, proj);
    b.stored = fused_bias_name(layer, proj);
    x.offset = dn ? e * I * C : e * C * 2 * I;
    x.stored_shape = dn ? Shape{E, I, C} : Shape{E, C, 2 * I};
    x.columns = dn ? BlockTensor::Columns{I, C, 0, 1} : BlockTensor::Columns{C, 2 * I, j, 2};
    b.offset = dn ? e * C : e * 2 * I;
    b.stored_shape = dn ? Shape{E, C} : Shape{E, 2 * I};
    if (!dn) b.columns = {1, 2 * I, j, 2};
  }
  if (m.gpt_oss) t.front.push_back(std::move(b));
  t.linears.push_back(std::move(x));
}

// The routed experts, the shared expert, the router.
void moe(Table& t, const ModelConfig& c, int64_t layer, bool fused) {
  const MoeConfig& m = c.moe;
  const int64_t C = c.hidden_size, E = m.num_experts, Is = m.shared_intermediate;
  const std::string router = router_module(c, fused);
  if (m.routing == Routing::SigmoidGroups)
    t.front.push_back({router + ".e_score_correction_bias", {E}, TensorRole::Buffer, &W::score_bias});
  if (m.gpt_oss) {  // GptOssTopKRouter is no nn.Linear: AutoRound neither quantizes nor lists it
    t.front.push_back({router + ".weight", {E, C}, TensorRole::Buffer, &W::router});
    t.bias(router + ".bias", E, &W::router_bias);
  }
  for (int64_t e = 0; e < E; ++e)
    for (ExpertProj proj : {ExpertProj::Gate, ExpertProj::Up, ExpertProj::Down}) expert(t, c, layer, fused, e, proj);
  if (Is) {
    const std::string s = "mlp." + m.shared_module + ".";
    t.linear(s + "gate_proj.weight", Is, C, &W::sg);
    t.linear(s + "up_proj.weight", Is, C, &W::su);
    t.linear(s + "down_proj.weight", C, Is, &W::sd);
  }
  // A Linear router keeps its stored name in every output; the report names it by the experts' module.
  if (!m.gpt_oss) {
    t.kept.push_back({router_module(c, false) + ".weight", {E, C}, TensorRole::Kept, &W::router});
    t.kept.back().stored = router_weight_name(c, layer, fused);
    t.kept.back().why = "MoE router";
  }
  if (Is && m.shared_gate) {
    t.kept.push_back({"mlp.shared_expert_gate.weight", {1, C}, TensorRole::Kept, &W::sgate});
    t.kept.back().why = "MoE shared expert gate";
  }
}

}  // namespace

std::vector<BlockTensor> block_tensors(const ModelConfig& c, int64_t layer, bool fused_experts) {
  Table t;
  t.norm("input_layernorm.weight", c.hidden_size, &W::ln1);
  if (c.sandwich_norms) {  // Gemma: post_attention_layernorm norms the attention's output
    t.norm("post_attention_layernorm.weight", c.hidden_size, &W::ln_post_attn);
    t.norm("pre_feedforward_layernorm.weight", c.hidden_size, &W::ln2);
    t.norm("post_feedforward_layernorm.weight", c.hidden_size, &W::ln_post_ffn);
  } else {
    t.norm("post_attention_layernorm.weight", c.hidden_size, &W::ln2);
  }
  if (c.is_delta_layer(layer)) delta_net(t, c);
  else if (c.is_mla()) mla(t, c);
  else gqa(t, c);
  if (c.is_moe_layer(layer)) moe(t, c, layer, fused_experts);
  else mlp(t, c);
  return t.done();
}

ModelConfig block_config(const BlockDims& d) {
  ModelConfig c;
  c.hidden_size = d.C;
  c.intermediate_size = d.I;
  c.num_layers = 1;
  c.num_heads = d.H;
  c.num_kv_heads = d.Hkv;
  c.head_dim = d.D;
  c.rms_norm_eps = d.eps;
  c.qk_norm = d.qk_norm;
  c.rotary_dims = d.rope;
  c.sliding_window = d.window;
  c.sliding_layers = {uint8_t(d.window > 0 ? 1 : 0)};
  c.attn_sinks = d.sinks;
  c.ffn_act = d.act;
  c.attn_scale = d.scale;
  c.sandwich_norms = d.sandwich;
  c.attn_out_gate = d.out_gate;
  if (d.attn == AttnKind::DeltaNet) {
    c.delta_layers = {1};
    c.delta = d.delta;
  }
  if (d.attn == AttnKind::Mla) {
    c.mla = {d.mla.q_lora, d.mla.kv_lora, d.mla.nope, d.mla.rope, d.mla.v, d.mla.interleave};
    c.head_dim = d.mla.rope;
  }
  if (d.is_moe()) {
    MoeConfig& m = c.moe;
    m.num_experts = d.moe.E;
    m.top_k = d.moe.K;
    m.expert_intermediate = d.moe.I;
    m.shared_intermediate = d.moe.Is;
    m.norm_topk_prob = d.moe.norm_topk;
    m.routing = d.moe.routing;
    m.n_group = d.moe.groups;
    m.topk_group = d.moe.topk_groups;
    m.routed_scaling_factor = d.moe.scaling;
    m.shared_gate = d.moe.shared_gate;
    m.gpt_oss = d.moe.expert_bias;
    if (m.gpt_oss) m.routing = Routing::TopKSoftmax;
  }
  return c;
}

std::vector<BlockTensor> block_tensors(const BlockDims& d) { return block_tensors(block_config(d), 0, false); }

}  // namespace ar
