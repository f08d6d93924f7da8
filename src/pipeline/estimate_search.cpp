#include "pipeline/estimate_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "quant/signround.h"

namespace ar {

BlockWeights first_rows(Context& ctx, const BlockWeights& w, double share, double* kept) {
  BlockWeights s = w;
  double all = 0, part_elems = 0;
  for (auto& [name, t] : quant::block_linears(s)) {
    const int64_t rows = t->dim(0), cols = t->dim(1);
    const int64_t keep = std::clamp<int64_t>(int64_t(std::ceil(double(rows) * share)), 1, rows);
    Tensor part = Tensor::empty({keep, cols}, DType::F32, ctx);
    std::memcpy(part.f32(), t->f32(), size_t(keep * cols) * sizeof(float));
    *t = std::move(part);
    all += double(rows * cols), part_elems += double(keep * cols);
  }
  if (kept) *kept = all > 0 ? part_elems / all : 1.0;
  return s;
}

SearchProbe measure_search(Context& ctx, const BlockWeights& block, const std::function<void(BlockWeights&)>& search) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  SearchProbe p;
  for (double share = 1.0 / 64;; share = std::min(1.0, share * 4)) {
    BlockWeights slice = first_rows(ctx, block, share, &p.share);
    const auto ts = Clock::now();
    search(slice);
    const double s = std::chrono::duration<double>(Clock::now() - ts).count();
    p.block_s = s / p.share;
    if (s >= kMinProbeSeconds || p.share >= 1.0) break;
  }
  p.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ctx.allocator().trim();  // the slices' buffers
  return p;
}

SearchPrice price_searches(Context& ctx, const std::vector<std::unique_ptr<SchemeTrack>>& tracks,
                           const BlockWeights& block, const BlockDims& dims, int64_t layer, int64_t blocks,
                           int processes) {
  SearchPrice price;
  Imatrix ones;  // the FP pass's statistics do not exist yet; a search's time does not depend on them
  for (const StatInput& in : stat_inputs(dims)) ones[in.key].assign(size_t(in.width), 1.f);
  for (const auto& t : tracks) {
    if (!t->searches_every_block()) continue;
    BlockWeights w = block;
    BlockReport br;
    int64_t elems = 0;
    const quant::LayerFormats selected = t->select(w, HfModel::layer_prefix(layer), br, &elems);
    const BlockStats st{t->wants_imatrix() ? &ones : nullptr, nullptr};
    const SearchProbe p = measure_search(ctx, block, [&](BlockWeights& slice) {
      t->search(quant::TuneLane{}, slice, selected, st);
    });
    const double s = p.block_s * double(blocks) / double(std::max(processes, 1));
    price.seconds += s;
    char b[200];
    std::snprintf(b, sizeof b, "%s%s's search ~%.1f s per block, measured now on %.0f%% of block %lld's weights in %.2f s",
                  price.what.empty() ? "" : "; ", t->label().c_str(), p.block_s, 100.0 * p.share,
                  (long long)(layer + 1), p.wall_s);
    price.what += b;
  }
  return price;
}

}  // namespace ar
