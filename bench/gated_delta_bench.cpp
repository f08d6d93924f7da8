// The gated delta rule's CPU kernel (cpu::gated_delta_fwd / _bwd) on a Qwen3-Next-80B-A3B-shaped linear
// attention layer (16 key heads and 32 value heads of 128 x 128), against the fp32 FMA peak measured in
// the same run (bench/peaks.h). Work per token and value head, counting an FMA as 2: the forward 6 Dk Dv
// (u = S^T k, the rank-1 update, o = S^T q), the backward 19 Dk Dv (the chunk's states recomputed, 4; the
// gradient passes, 15). Also the memory the backward keeps: the checkpoints (one state per 64 tokens per
// head) and the scratch of a work item. Output: one JSON line per direction.
//   gated_delta_bench [--batch 2] [--tokens 2048] [--kheads 16] [--vheads 32] [--dk 128] [--dv 128]
//                     [--reps 3] [--threads T]
#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "core/context.h"
#include "kernels/cpu/ops.h"
#include "bench_args.h"
#include "peaks.h"

using namespace ar;

namespace {
using bench::arg;
using bench::best_time;

// Values in the model's ranges: unit-norm q, k (q scaled), decays exp(g) in (0.37, 1), beta in (0, 1).
std::vector<float> filled(size_t n, uint32_t seed, float lo, float hi) {
  std::vector<float> x(n);
  uint32_t s = seed;
  for (float& e : x) e = lo + (hi - lo) * float((s = s * 1664525u + 1013904223u) >> 8) / float(1 << 24);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  const ref::DeltaShape s{arg(argc, argv, "--batch", 2), arg(argc, argv, "--tokens", 2048), arg(argc, argv, "--kheads", 16),
                          arg(argc, argv, "--vheads", 32), arg(argc, argv, "--dk", 128), arg(argc, argv, "--dv", 128)};
  const int64_t reps = arg(argc, argv, "--reps", 3);
  Context ctx(Device{}, int(arg(argc, argv, "--threads", 0)));
  const size_t nq = size_t(s.B * s.T * s.Hk * s.Dk), nv = size_t(s.B * s.T * s.Hv * s.Dv), ng = size_t(s.B * s.T * s.Hv);
  const float qs = 1.f / float(s.Dk);  // |q| ~ Dk^-1/2 after the scale, entries ~ 1/Dk
  auto q = filled(nq, 1, -qs, qs), k = filled(nq, 2, -1.f / std::sqrt(float(s.Dk)), 1.f / std::sqrt(float(s.Dk)));
  auto v = filled(nv, 3, -1, 1), dO = filled(nv, 4, -1, 1), g = filled(ng, 5, -1.f, -0.001f), beta = filled(ng, 6, 0, 1);
  std::vector<float> o(nv), dq(nq), dk(nq), dv(nv), dg(ng), db(ng);
  std::vector<float> ck(size_t(cpu::gated_delta_checkpoint_floats(s)));
  const double fwd = best_time(reps, [&] {
    cpu::gated_delta_fwd(ctx, s, q.data(), k.data(), v.data(), g.data(), beta.data(), o.data(), ck.data());
  });
  const double bwd = best_time(reps, [&] {
    cpu::gated_delta_bwd(ctx, s, dO.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), ck.data(), dq.data(),
                         dk.data(), dv.data(), dg.data(), db.data());
  });
  const double peak = bench::fp32_peak_gflops(ctx);
  const double units = double(s.B * s.T * s.Hv) * double(s.Dk * s.Dv);
  const double ck_mib = double(ck.size()) * 4 / (1 << 20);
  const double item_mib = double((cpu::kDeltaChunk + 2) * s.Dk * s.Dv + 2 * cpu::kDeltaChunk * s.Dv) * 4 / (1 << 20);
  for (const auto& [dir, sec, flops] : {std::tuple{"forward", fwd, 6 * units}, {"backward", bwd, 19 * units}})
    std::printf("{\"direction\": \"%s\", \"B\": %lld, \"T\": %lld, \"Hk\": %lld, \"Hv\": %lld, \"Dk\": %lld, \"Dv\": %lld, "
                "\"threads\": %d, \"seconds\": %.4f, \"gflops\": %.1f, \"fp32_peak_gflops\": %.1f, \"peak_isa\": \"%s\", "
                "\"of_peak\": %.3f, \"checkpoints_mib\": %.1f, \"scratch_per_item_mib\": %.2f}\n",
                dir, (long long)s.B, (long long)s.T, (long long)s.Hk, (long long)s.Hv, (long long)s.Dk, (long long)s.Dv,
                ctx.threads(), sec, flops / sec / 1e9, peak, bench::fp32_peak_isa(), flops / sec / 1e9 / peak, ck_mib,
                item_mib);
  return 0;
}
