#include "quant/expert_grad_tree.h"

#include <algorithm>

#include "model/moe_ffn.h"

namespace ar::quant {
namespace {

// One weight's tree over leaves [a, b), as BlockTuner::tree: buffer 0 is the root (the target), the
// others scratch of the weight's size; the left half into a free buffer, added by the right half's last
// leaf GEMM (innermost pending sum first); a pair of leaves shares a buffer.
class WeightTree {
 public:
  WeightTree(cpu::CpuOps& o, const cpu::DeferredGrads& d, const ExpertGradTarget& t) : o_(o), d_(d), t_(t) {}
  void run() { tree(0, d_.leaves(), 0, {}); }

 private:
  float* buf(int i) {
    if (i == 0) return t_.dst;
    while (int(scratch_.size()) < i) scratch_.push_back(o_.alloc(t_.out * t_.in));
    return scratch_[size_t(i - 1)].f32();
  }
  void leaf(int64_t i, int dst, bool accumulate, const std::vector<int>& adds) {
    cpu::GradAddends ga;
    std::vector<const float*> m;
    for (auto x = adds.rbegin(); x != adds.rend(); ++x) m.push_back(buf(*x));
    float* dw = buf(dst);
    if (!m.empty()) ga.set(dw, std::move(m));
    cpu::CpuOps lo{o_.ctx, o_.amp, &ga};
    if (const cpu::DeferredGrads::Product* p = d_.find(i, t_.slot))
      return lo.linear_bwd(p->dy, p->x, nullptr, nullptr, false, dw, accumulate, nullptr, p->rows, p->in, p->out);
    weight_grad_of_no_rows(lo, dw, accumulate, t_.in, t_.out);  // a leaf that routed no row to this expert
  }
  void tree(int64_t a, int64_t b, int dst, std::vector<int> pend) {
    if (b - a == 1) return leaf(a, dst, false, pend);
    if (b - a == 2) {
      leaf(a, dst, false, {});
      return leaf(a + 1, dst, true, pend);
    }
    const int64_t mid = (a + b) / 2;
    int x = 0;
    while (x == dst || std::find(pend.begin(), pend.end(), x) != pend.end()) ++x;
    tree(a, mid, x, {});
    pend.push_back(x);
    tree(mid, b, dst, std::move(pend));
  }

  cpu::CpuOps& o_;
  const cpu::DeferredGrads& d_;
  const ExpertGradTarget& t_;
  std::vector<Tensor> scratch_;
};

}  // namespace

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
  ops.for_each_group(cost, [&](cpu::CpuOps& o, int64_t e) {
    for (size_t i = first[size_t(e)]; i < first[size_t(e) + 1]; ++i) WeightTree(o, d, targets[i]).run();
  });
}

}  // namespace ar::quant
