#include "model/linear_specs.h"

#include "model/block_tensors.h"

namespace ar {

// The table's Linears; an expert's group replaces its index with "*" (mlp.experts.*.gate_proj).
std::vector<LinearSpec> block_linear_specs(const ModelConfig& c, int64_t layer) {
  std::vector<LinearSpec> r;
  for (const BlockTensor& t : block_tensors(c, layer, false)) {
    if (t.role != TensorRole::Linear) continue;
    std::string name = t.module(), group = name;
    if (t.list) {
      std::string idx(".");
      idx += std::to_string(t.index);
      idx += '.';
      group.replace(group.find(idx), idx.size(), ".*.");
    }
    r.push_back({name, group, t.shape[0], t.shape[1]});
  }
  return r;
}

int64_t block_params(const ModelConfig& c, int64_t layer) {
  int64_t n = 0;
  for (const BlockTensor& t : block_tensors(c, layer, false))
    if (t.role == TensorRole::Norm || t.role == TensorRole::Linear || t.role == TensorRole::Kept) n += shape_numel(t.shape);
  return n;
}

}  // namespace ar
