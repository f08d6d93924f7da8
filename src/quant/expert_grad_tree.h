// The tuning tree's sums for the experts of a MoE block (signround.cpp's tree), one expert at a time.
// In a per-sample tree every leaf's backward would write (or add into) every expert's full-size weight
// gradient: the whole block's experts, several times per iteration, for a few rows each. Instead the
// block hands the leaves' expert products over (cpu::DeferredGrads) and this sums them after the
// rank's last leaf: each expert's Linears go through the same tree (the same GEMM calls, beta and
// addends, in the same order, so the same bits) on scratch buffers of one weight, the root written
// once into the rank's gradient. Experts run grouped on the pool.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace ar::quant {

// A tuned expert weight: its deferred slot (3 e + 0/1/2), shape [out, in], and where its root sum goes.
struct ExpertGradTarget {
  int64_t slot = 0, out = 0, in = 0;
  float* dst = nullptr;
};

// The tree over `leaves` leaves as signround.cpp's tree sums them, one step per leaf
// (cpu::GradTreeStep): buffer 0 the root, the others scratch; the left half into a free buffer, added
// by the right half's last leaf (innermost pending sum first); a pair of leaves shares a buffer.
std::vector<cpu::GradTreeStep> leaf_tree_steps(int64_t leaves);

// dst of every target = the tree over the leaves of `d` (as signround.cpp's tree over [0, d.leaves())).
// `ops` gives the context, pool and bf16 operands (amp); targets of one expert must be adjacent.
void expert_grad_tree(cpu::CpuOps& ops, const cpu::DeferredGrads& d, const std::vector<ExpertGradTarget>& targets);

}  // namespace ar::quant
