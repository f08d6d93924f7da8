// Per-block tuning wall, serial vs the data-parallel lane, with the lane's phase breakdown and the
// exchange's bytes and time. Runs four configurations in one process on the same block and data:
// serial and world W, each deterministic (per-sample leaves) and batched (micro-batch leaves).
// Serial runs on one context over all cores (BLAS threads); the lane on W CPU devices (cores split).
// Also measures the SGEMM peak of both set-ups in the same run. Last line: one JSON object.
//   lane_bench [--world 2] [--iters 4] [--hidden 1024] [--inter 4096] [--heads 16] [--kv 4] [--seq 256] [--bs 8]
//              [--amp 0|1] (1: bf16 GEMM operands, as the CLI's --amp)
#include <chrono>
#include <cstdio>
#include <string>

#include "bench_block.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"
#include "parallel/devices.h"
#include "quant/signround.h"
#include "core/float_mode.h"
#include "core/malloc_policy.h"

using namespace ar;
using Clock = std::chrono::steady_clock;

namespace {
double sgemm_peak(Context& ctx) {
  const int m = 1024;
  Tensor a = bench::rnd(ctx, {m, m}, 1, 1), b = bench::rnd(ctx, {m, m}, 2, 1), c = Tensor::empty({m, m}, DType::F32, ctx);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    auto t0 = Clock::now();
    cpu::gemm(ctx, false, true, m, m, m, 1.f, a.f32(), m, b.f32(), m, 0.f, c.f32(), m);
    best = std::max(best, 2.0 * m * m * double(m) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  return best;
}

struct Run {
  double wall = 0;  // per iteration
  quant::TunePhases ph;
  double loss = 0;
};
}  // namespace

int main(int argc, char** argv) {
  ar::set_process_malloc_policy();  // as the CLI runs
  ar::flush_denormals();            // core/float_mode.h: on this thread and every later one
  const int world = int(bench::arg(argc, argv, "--world", 2)), iters = int(bench::arg(argc, argv, "--iters", 4));
  const bool amp = bench::arg(argc, argv, "--amp", 0) != 0;
  if (amp && !cpu::bf16_gemm_supported()) {
    std::printf("lane_bench: --amp 1 needs bf16 GEMMs: %s\n", cpu::bf16_support_summary().c_str());
    return 1;
  }
  Context home(Device{}, 0);
  bench::BenchBlock blk = bench::make_block(home, argc, argv, 1024, 4096, 16, 4, 256);
  std::vector<Device> devs;
  for (int i = 0; i < world; ++i) devs.push_back({DeviceKind::CPU, i});
  auto slots = parallel::cpu_device_slots(parallel::CpuTopology::detect(), devs);
  parallel::ReplicaGroup group(slots);
  const double peak_home = sgemm_peak(home);
  double peak_dev = 0;
  group.run(1, [&](int r) { peak_dev = sgemm_peak(group.ctx(r)); });
  auto run = [&](bool deterministic, int w) {
    quant::SignRoundOptions o;
    o.batch_size = blk.n;
    o.deterministic = deterministic;
    o.amp = amp;
    quant::TuneLane lane;
    if (w > 1) lane = {&group, w, {}};
    o.iters = 1;  // warm-up: allocator caches, BLAS buffers, page faults
    {
      BlockWeights c = quant::clone_block(blk.w, home);
      quant::signround_tune_block(home, blk.d, c, {4, 128, true}, blk.aux(), blk.x, blk.y, blk.mask, o, lane);
    }
    o.iters = iters;
    BlockWeights c = quant::clone_block(blk.w, home);
    auto t0 = Clock::now();
    auto r = quant::signround_tune_block(home, blk.d, c, {4, 128, true}, blk.aux(), blk.x, blk.y, blk.mask, o, lane);
    Run out;
    out.wall = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    out.ph = r.phases;
    out.loss = r.loss_last;
    return out;
  };
  std::printf("lane_bench: hidden %lld, inter %lld, heads %lld/%lld, %lld x %lld tokens, %.1f M params, %d iters; "
              "%d cores, world %d (%s ... %s)\n",
              (long long)blk.d.C, (long long)blk.d.I, (long long)blk.d.H, (long long)blk.d.Hkv, (long long)blk.n,
              (long long)blk.T, blk.params() / 1e6, iters, home.threads(), world, slots.front().str().c_str(),
              slots.back().str().c_str());
  std::printf("SGEMM peak (1024^3): serial context %.1f GFLOP/s, one lane device %.1f GFLOP/s\n", peak_home, peak_dev);
  const Run sd = run(true, 1), sb = run(false, 1), wd = run(true, world), wb = run(false, world);
  auto line = [&](const char* name, const Run& r) {
    const auto& p = r.ph;
    std::printf("%-22s %.3f s/iter  %.1f GFLOP/s  fwd %.3f bwd %.3f qdq %.3f exch %.4f (%.2f MB/rank) step %.4f | "
                "mirrors %.3f warmup %.3f teardown %.3f  loss %.6g\n",
                name, r.wall, blk.flops() / r.wall / 1e9, p.forward / iters, p.backward / iters, p.qdq / iters,
                p.exchange / iters, double(p.exchange_bytes) / iters / 1e6, p.step / iters, p.mirrors, p.warmup,
                p.teardown, r.loss);
  };
  line("serial deterministic", sd);
  line("serial batched", sb);
  line(("world " + std::to_string(world) + " deterministic").c_str(), wd);
  line(("world " + std::to_string(world) + " batched").c_str(), wb);
  std::printf("speed-up world %d vs serial: deterministic %.2fx, batched %.2fx; deterministic cost: serial %+.1f%%, "
              "world %d %+.1f%%; exchange share of the world-%d iteration %.1f%%\n",
              world, sd.wall / wd.wall, sb.wall / wb.wall, 100 * (sd.wall / sb.wall - 1), world,
              100 * (wd.wall / wb.wall - 1), world, 100 * wd.ph.exchange / iters / wd.wall);
  std::printf("{\"bench\":\"lane\",\"world\":%d,\"params\":%.0f,\"tokens\":%lld,\"serial_det_s\":%.4f,"
              "\"serial_batched_s\":%.4f,\"world_det_s\":%.4f,\"world_batched_s\":%.4f,\"exchange_s\":%.5f,"
              "\"exchange_bytes_per_rank\":%lld,\"sgemm_peak_serial\":%.1f,\"sgemm_peak_device\":%.1f,"
              "\"peak_rss_mb\":%.0f,\"amp\":%s}\n",
              world, blk.params(), (long long)(blk.n * blk.T), sd.wall, sb.wall, wd.wall, wb.wall,
              wd.ph.exchange / iters, (long long)(wd.ph.exchange_bytes / iters), peak_home, peak_dev, peak_rss_mb(),
              amp ? "true" : "false");
  return 0;
}
