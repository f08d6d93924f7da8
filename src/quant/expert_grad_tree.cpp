#include "quant/expert_grad_tree.h"

#include <algorithm>

#include "model/moe_ffn.h"

namespace ar::quant {
namespace {

void tree_steps(int64_t a, int64_t b, int dst, std::vector<int> pend, std::vector<cpu::GradTreeStep>& steps) {
  auto leaf = [&](bool accumulate, const std::vector<int>& p) {
    steps.push_back({dst, accumulate, std::vector<int>(p.rbegin(), p.rend())});
  };
  if (b - a == 1) return leaf(false, pend);
  if (b - a == 2) {
    leaf(false, {});
    return leaf(true, pend);
  }
  const int64_t mid = (a + b) / 2;
  int x = 0;
  while (x == dst || std::find(pend.begin(), pend.end(), x) != pend.end()) ++x;
  tree_steps(a, mid, x, {}, steps);
  pend.push_back(x);
  tree_steps(mid, b, dst, std::move(pend), steps);
}

// One weight's tree: in one pass over the weight where the item's kernels allow it (CpuOps::grad_tree:
// row-independent GEMMs, the tuner's deterministic MoE runs), each leaf's product as CpuOps::linear_bwd
// computes a leaf's own. Elsewhere step by step, each leaf's product one GEMM on scratch buffers of the
// weight's size.
class WeightTree {
 public:
  WeightTree(cpu::CpuOps& o, const cpu::DeferredGrads& d, const ExpertGradTarget& t,
             const std::vector<cpu::GradTreeStep>& steps)
      : o_(o), d_(d), t_(t), steps_(steps) {}
  void run() {
    std::vector<cpu::CpuOps::GradLeaf> leaves;
    for (int64_t l = 0; l < d_.leaves(); ++l) {
      const cpu::DeferredGrads::Product* p = d_.find(l, t_.slot);
      leaves.push_back(p ? cpu::CpuOps::GradLeaf{&p->dy, &p->x, p->rows} : cpu::CpuOps::GradLeaf{});
    }
    if (o_.grad_tree(leaves, steps_, {}, t_.out, t_.in, t_.dst)) return;
    for (size_t l = 0; l < steps_.size(); ++l) leaf(int64_t(l), steps_[l]);
  }

 private:
  float* buf(int i) {
    if (i == 0) return t_.dst;
    while (int(scratch_.size()) < i) scratch_.push_back(o_.alloc(t_.out * t_.in));
    return scratch_[size_t(i - 1)].f32();
  }
  void leaf(int64_t i, const cpu::GradTreeStep& s) {
    cpu::GradAddends ga;
    std::vector<const float*> m;
    for (int k : s.adds) m.push_back(buf(k));
    float* dw = buf(s.dst);
    if (!m.empty()) ga.set(dw, std::move(m));
    cpu::CpuOps lo{o_.ctx, o_.amp, &ga};
    if (const cpu::DeferredGrads::Product* p = d_.find(i, t_.slot))
      return lo.linear_bwd(p->dy, p->x, nullptr, nullptr, false, dw, s.accumulate, nullptr, p->rows, p->in, p->out);
    weight_grad_of_no_rows(lo, dw, s.accumulate, t_.in, t_.out);  // a leaf that routed no row to this expert
  }
  cpu::CpuOps& o_;
  const cpu::DeferredGrads& d_;
  const ExpertGradTarget& t_;
  const std::vector<cpu::GradTreeStep>& steps_;
  std::vector<Tensor> scratch_;
};

}  // namespace

std::vector<cpu::GradTreeStep> leaf_tree_steps(int64_t leaves) {
  std::vector<cpu::GradTreeStep> steps;
  if (leaves > 0) tree_steps(0, leaves, 0, {}, steps);
  return steps;
}

void expert_grad_tree(cpu::CpuOps& ops, const cpu::DeferredGrads& d, const std::vector<ExpertGradTarget>& targets) {
  if (d.leaves() == 0) return;
  // Items: runs of targets of one expert (their Linears share operands, whose bf16 packing is lazy);
  // cost: the rows of their products plus a pass over each weight per leaf.
  std::vector<size_t> first;
  for (size_t i = 0; i < targets.size(); ++i)
    if (i == 0 || targets[i].slot / 3 != targets[i - 1].slot / 3) first.push_back(i);
  first.push_back(targets.size());
  std::vector<int64_t> cost(first.size() - 1);
  for (size_t e = 0; e + 1 < first.size(); ++e)
    for (size_t i = first[e]; i < first[e + 1]; ++i)
      for (int64_t l = 0; l < d.leaves(); ++l) {
        const cpu::DeferredGrads::Product* p = d.find(l, targets[i].slot);
        cost[e] += 4 * (p ? p->rows : 0) + 8;
      }
  const std::vector<cpu::GradTreeStep> steps = leaf_tree_steps(d.leaves());
  ops.for_each_group(cost, [&](cpu::CpuOps& o, int64_t e) {
    for (size_t i = first[size_t(e)]; i < first[size_t(e) + 1]; ++i) WeightTree(o, d, targets[i], steps).run();
  });
}

}  // namespace ar::quant
