#include "model/linear_specs.h"

#include "model/moe_names.h"

namespace ar {

std::vector<LinearSpec> block_linear_specs(const ModelConfig& c, int64_t layer) {
  const BlockDims d = c.block_dims(layer);
  const int64_t C = d.C, q = d.H * d.D, kv = d.Hkv * d.D;
  std::vector<LinearSpec> r = {{"self_attn.q_proj", "self_attn.q_proj", q, C},
                               {"self_attn.k_proj", "self_attn.k_proj", kv, C},
                               {"self_attn.v_proj", "self_attn.v_proj", kv, C},
                               {"self_attn.o_proj", "self_attn.o_proj", C, q}};
  const ExpertProj projs[3] = {ExpertProj::Gate, ExpertProj::Up, ExpertProj::Down};
  auto mlp = [&](int64_t I, auto name, auto group) {
    for (ExpertProj p : projs)
      r.push_back({name(p), group(p), p == ExpertProj::Down ? C : I, p == ExpertProj::Down ? I : C});
  };
  if (!d.is_moe()) {
    auto dense = [](ExpertProj p) {
      return std::string(p == ExpertProj::Gate ? "mlp.gate_proj" : p == ExpertProj::Up ? "mlp.up_proj" : "mlp.down_proj");
    };
    mlp(d.I, dense, dense);
    return r;
  }
  const bool mx = c.moe.mixtral_names;
  for (int64_t e = 0; e < d.moe.E; ++e) {
    auto group = [&](ExpertProj p) {
      std::string g = expert_linear_name(mx, 0, p);
      return g.replace(g.find(".0."), 3, ".*.");
    };
    mlp(d.moe.I, [&](ExpertProj p) { return expert_linear_name(mx, e, p); }, group);
  }
  if (d.moe.Is) mlp(d.moe.Is, shared_linear_name, shared_linear_name);
  return r;
}

int64_t block_params(const ModelConfig& c, int64_t layer) {
  const BlockDims d = c.block_dims(layer);
  int64_t n = 2 * d.C + (d.qk_norm ? 2 * d.D : 0);
  for (const auto& s : block_linear_specs(c, layer)) n += s.out * s.in;
  if (d.is_moe()) n += d.moe.E * d.C + (d.moe.Is ? d.C : 0);  // router, shared_expert_gate
  return n;
}

}  // namespace ar
