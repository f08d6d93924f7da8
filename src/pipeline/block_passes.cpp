#include "pipeline/block_passes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "core/error.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "quant/linear_family.h"
#include "quant/opt_rtn_fp.h"

namespace ar {

namespace {
// Column sums of x^2 over `rows` rows, added to acc.
void accumulate_sq(const float* x, int64_t rows, int64_t cols, float* acc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) acc[c] += x[r * cols + c] * x[r * cols + c];
}


// Every process's rows (width floats each; shards differ in size by at most a few rows) in rank order.
std::vector<float> gather_rows(parallel::ProcessLink& procs, const std::vector<float>& mine, int64_t width) {
  const int P = procs.size();
  std::vector<int64_t> rows(static_cast<size_t>(P));
  const int64_t my_rows = int64_t(mine.size()) / width;
  procs.allgather(&my_rows, sizeof my_rows, rows.data());
  for (int q = 0; q < P; ++q)  // a peer's count sizes our buffers: checked, not trusted
    if (rows[size_t(q)] < 0 || rows[size_t(q)] > (int64_t(1) << 31) / std::max<int64_t>(width, 1))
      fail(ErrorKind::Internal, "imatrix gather: rank " + std::to_string(q) + " reports " +
                                    std::to_string(rows[size_t(q)]) + " samples");
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  std::vector<float> padded(size_t(most * width), 0.f), all(size_t(most * width * P));
  std::copy(mine.begin(), mine.end(), padded.begin());
  procs.allgather(padded.data(), padded.size() * sizeof(float), all.data());
  std::vector<float> out;
  for (int q = 0; q < P; ++q)
    out.insert(out.end(), all.begin() + q * most * width, all.begin() + (q * most + rows[size_t(q)]) * width);
  return out;
}

float abs_max(const float* x, int64_t n, float m) {
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// The maxima of every process, folded by max (order-free, so any world gives the serial value).
void fold_max_over_processes(parallel::ProcessLink& procs, std::vector<float>& m) {
  std::vector<float> all(m.size() * size_t(procs.size()));
  procs.allgather(m.data(), m.size() * sizeof(float), all.data());
  for (size_t i = 0; i < all.size(); ++i) m[i % m.size()] = std::max(m[i % m.size()], all[i]);
}

// The counts of every process, added (integers: any order gives the serial value).
void add_over_processes(parallel::ProcessLink& procs, std::vector<int64_t>& v) {
  std::vector<int64_t> all(v.size() * size_t(procs.size()));
  procs.allgather(v.data(), v.size() * sizeof(int64_t), all.data());
  std::fill(v.begin(), v.end(), 0);
  for (size_t i = 0; i < all.size(); ++i) v[i % v.size()] += all[i];
}

// The rows a forward's cache holds of each statistics input (stat_inputs' order): fp32 (keep_fp32).
// A routed input's row i is token slots[i] / K of the micro-batch.
struct StatRows {
  const float* x = nullptr;
  int64_t rows = 0;
  const std::vector<int64_t>* slots = nullptr;
  int64_t token(int64_t i, int64_t K) const { return slots ? (*slots)[size_t(i)] / K : i; }
};
std::vector<StatRows> stat_rows(const BlockDims& d, const BlockRunner<cpu::CpuOps>::Cache& c, int64_t N) {
  std::vector<StatRows> r = {{c.h1o.x, N}};
  if (d.attn == AttnKind::Mla) {
    if (d.mla.q_lora) r.push_back({c.mla.qan.x, N});
    r.insert(r.end(), {{c.mla.latn.x, N}, {c.mla.ov.x, N}});
  } else if (d.attn == AttnKind::DeltaNet) {
    r.push_back({c.delta.no.x, N});
  } else {
    r.push_back({c.attn.oo.x, N});
  }
  r.push_back({c.h2o.x, N});
  if (!d.is_moe()) {
    r.push_back({c.mlp.ao.x, N});
    return r;
  }
  for (const auto& e : c.moe.ex) {
    r.push_back({e.rows() ? e.xo.x : nullptr, e.rows(), &e.slots});
    r.push_back({e.rows() ? e.ao.x : nullptr, e.rows(), &e.slots});
  }
  if (d.moe.Is) r.push_back({c.moe.sao.x, N});
  return r;
}

void dispatch(Context& home, const quant::TuneLane& lane, const std::function<void(Context&, int, int)>& fn) {
  if (!lane.parallel()) return fn(home, 0, 1);
  lane.run([&](int r) { fn(lane.ctx(r), r, lane.world); });
}
}  // namespace

std::vector<StatInput> stat_inputs(const BlockDims& d) {
  std::vector<StatInput> r = {{"attn_in", d.C}};
  if (d.attn == AttnKind::Mla) {
    if (d.mla.q_lora) r.push_back({"q_b_in", d.mla.q_lora});
    r.insert(r.end(), {{"kv_b_in", d.mla.kv_lora}, {"o_in", d.H * d.mla.v}});
  } else if (d.attn == AttnKind::DeltaNet) {
    r.push_back({"o_in", d.delta.value_dim()});
  } else {
    r.push_back({"o_in", d.H * d.D});
  }
  r.push_back({"mlp_in", d.C});
  if (!d.is_moe()) {
    r.push_back({"down_in", d.I});
    return r;
  }
  for (int64_t e = 0; e < d.moe.E; ++e) {
    r.push_back({"expert." + std::to_string(e) + ".in", d.C});
    r.push_back({"expert." + std::to_string(e) + ".down", d.moe.I});
  }
  if (d.moe.Is) r.push_back({"shared.down", d.moe.Is});
  return r;
}

void block_forward_all(Context& home, const quant::TuneLane& lane, const BlockDims& dims, const BlockWeights& w,
                       BlockAux<float> aux, const Tensor& x, Tensor& y, int64_t n, int64_t bs, bool amp,
                       const PassStats& stats, const ActQdq<float>* act) {
  const int64_t per = aux.T * dims.C, K = dims.moe.K;
  const std::vector<StatInput> inputs = stat_inputs(dims);
  const size_t nin = inputs.size();
  std::vector<int64_t> offset(nin + 1, 0);  // of each input in a sample's imatrix row
  for (size_t k = 0; k < nin; ++k) offset[k + 1] = offset[k] + inputs[k].width;
  const int64_t width = offset[nin];
  Imatrix* imat = stats.imatrix;
  ActMax* amax = stats.act_max;
  const bool routed = dims.is_moe();  // counted always: an expert without tokens gets a uniform imatrix
  std::vector<float> per_sample(imat ? size_t(n * width) : 0, 0.f);
  const size_t ranks = size_t(std::max(lane.parallel() ? lane.world : 1, 1));
  std::vector<std::vector<float>> rank_max(ranks, std::vector<float>(amax ? nin : 0, 0.f));
  std::vector<std::vector<int64_t>> rank_routed(ranks, std::vector<int64_t>(routed ? size_t(dims.moe.E) : 0, 0));
  dispatch(home, lane, [&](Context& ctx, int r, int world) {
    const int64_t s_begin = n * r / world, s_end = n * (r + 1) / world;
    BlockWeights mirror;
    if (r > 0) mirror = quant::clone_block(w, ctx);
    const BlockWeights& bw = r > 0 ? mirror : w;
    cpu::Bf16Operands operands;
    std::vector<Tensor> wb;  // amp: the Linears' weights in bf16, rounded once
    std::vector<cpu::PackedB> packed(amp ? quant::block_linears(bw).size() : 0);  // W^T packed for the forward
    if (amp)
      for (auto& [name, t] : quant::block_linears(bw)) {
        const int64_t out = t->dim(0), in = t->dim(1);
        wb.push_back(Tensor::empty(t->shape(), DType::BF16, ctx));
        cpu::fp32_to_bf16(ctx, t->f32(), wb.back().data<uint16_t>(), t->numel());
        cpu::PackedB& p = packed[wb.size() - 1];
        p.pack_later(wb.back().data<uint16_t>(), out, in, true);
        operands.bind(t->f32(), {wb.back().data<uint16_t>(), &p, nullptr});
      }
    cpu::CpuOps ops{ctx, amp ? &operands : nullptr};
    ops.keep_fp32 = imat || amax || act;  // the statistics and the activation QDQ read the fp32 inputs
    BlockRunner<cpu::CpuOps> run(ops, dims);
    BlockAux<float> a = aux;
    const bool bx = x.dtype() == DType::BF16, by = y.dtype() == DType::BF16;
    Tensor xs = bx ? Tensor::empty({std::min(bs, n) * per}, DType::F32, ctx) : Tensor();
    Tensor ys = by ? Tensor::empty({std::min(bs, n) * per}, DType::F32, ctx) : Tensor();
    for (int64_t s0 = s_begin; s0 < s_end; s0 += bs) {
      a.B = std::min(bs, s_end - s0);
      BlockRunner<cpu::CpuOps>::Cache c;
      if (bx) cpu::bf16_to_fp32(ctx, x.data<uint16_t>() + s0 * per, xs.f32(), a.B * per);
      float* yp = by ? ys.f32() : y.f32() + s0 * per;
      run.forward(bw.ptrs(), a, bx ? xs.f32() : x.f32() + s0 * per, yp, c, nullptr, act);
      if (by) cpu::fp32_to_bf16(ctx, yp, y.data<uint16_t>() + s0 * per, a.B * per);
      if (routed)
        for (size_t e = 0; e < c.moe.ex.size(); ++e) rank_routed[size_t(r)][e] += c.moe.ex[e].rows();
      if (!imat && !amax) continue;
      const std::vector<StatRows> rows = stat_rows(dims, c, a.B * a.T);
      for (size_t k = 0; k < nin; ++k) {
        const StatRows& in = rows[k];
        const int64_t cols = inputs[k].width;
        if (amax) rank_max[size_t(r)][k] = abs_max(in.x, in.rows * cols, rank_max[size_t(r)][k]);
        if (imat)  // each row into its sample's sums (rows are in token order)
          for (int64_t i = 0; i < in.rows; ++i)
            accumulate_sq(in.x + i * cols, 1, cols,
                          per_sample.data() + (s0 + in.token(i, K) / a.T) * width + offset[k]);
      }
    }
  });
  std::vector<int64_t> tokens(size_t(dims.moe.E), 0);  // per expert, the whole pool's
  for (const auto& rr : rank_routed)
    for (size_t e = 0; e < rr.size(); ++e) tokens[e] += rr[e];
  if (routed && lane.procs) add_over_processes(*lane.procs, tokens);
  if (stats.routed) *stats.routed = tokens;
  if (amax) {
    std::vector<float> m(nin, 0.f);
    for (const auto& rm : rank_max)
      for (size_t k = 0; k < nin; ++k) m[k] = std::max(m[k], rm[k]);
    if (lane.procs) fold_max_over_processes(*lane.procs, m);
    for (size_t k = 0; k < nin; ++k) (*amax)[inputs[k].key] = m[k];
    // An expert without tokens takes the largest maximum of the layer's experts at the same input, as
    // AutoRound's set_amax_for_all_moe_layers fills uncalibrated experts (FP8_STATIC's input scales).
    for (const char* part : {".in", ".down"}) {
      float top = 0.f;
      for (int64_t e = 0; e < dims.moe.E; ++e) top = std::max(top, (*amax)["expert." + std::to_string(e) + part]);
      for (int64_t e = 0; e < dims.moe.E; ++e)
        if (tokens[size_t(e)] == 0) (*amax)["expert." + std::to_string(e) + part] = top;
    }
  }
  if (!imat) return;
  if (lane.procs) per_sample = gather_rows(*lane.procs, per_sample, width);
  n = int64_t(per_sample.size()) / width;
  for (size_t k = 0; k < nin; ++k) {
    std::vector<float>& acc = (*imat)[inputs[k].key];
    acc.assign(size_t(inputs[k].width), 0.f);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < inputs[k].width; ++c) acc[size_t(c)] += per_sample[size_t(s * width + offset[k] + c)];
  }
  // An expert without tokens: AutoRound's hooks never fired, so its search weighs every channel 1.
  for (int64_t e = 0; e < dims.moe.E; ++e)
    if (tokens[size_t(e)] == 0)
      for (const char* part : {".in", ".down"}) {
        std::vector<float>& v = (*imat)["expert." + std::to_string(e) + part];
        std::fill(v.begin(), v.end(), 1.f);
      }
}

std::string linear_input_key(const std::string& linear) {
  if (linear.rfind("mlp.shared_expert", 0) == 0)  // Qwen2-MoE's shared_expert, DeepSeek's shared_experts
    return linear.ends_with(".down_proj") ? "shared.down" : "mlp_in";
  const size_t ex = linear.find("experts.");
  if (ex != std::string::npos) {  // mlp.experts.<e>.gate_proj, block_sparse_moe.experts.<e>.w2
    const size_t dot = linear.find('.', ex + 8);
    const std::string e = linear.substr(ex + 8, dot - ex - 8), proj = linear.substr(dot + 1);
    return "expert." + e + (proj == "down_proj" || proj == "w2" ? ".down" : ".in");
  }
  if (linear == "self_attn.o_proj" || linear == "linear_attn.out_proj") return "o_in";
  if (linear == "self_attn.q_b_proj") return "q_b_in";
  if (linear == "self_attn.kv_b_proj") return "kv_b_in";
  if (linear == "mlp.down_proj") return "down_in";
  if (linear.rfind("mlp.", 0) == 0) return "mlp_in";
  return "attn_in";
}

ActQdq<float> block_act_qdq(const quant::BlockTuneResult& tr, const BlockWeights& w) {
  ActQdq<float> a;
  const auto slots = quant::block_linears(w);
  a.s.assign(slots.size(), 0.f);
  std::map<std::string, size_t> slot_of;
  for (size_t k = 0; k < slots.size(); ++k) slot_of[slots[k].first] = k;
  for (const auto& L : tr.layers)
    if (auto it = slot_of.find(L.name); it != slot_of.end()) a.s[it->second] = L.input_scale;
  return a;
}

const std::vector<float>& imatrix_for(const Imatrix& im, const std::string& linear) {
  const auto it = im.find(linear_input_key(linear));
  if (it == im.end()) fail(ErrorKind::Internal, "no statistics input '" + linear_input_key(linear) + "' for " + linear);
  return it->second;
}

bool has_opt_rtn(const quant::QuantFormat& f) {
  return f.is_float() ? quant::fp_has_opt_rtn(*f.fp) : f.sym && f.bits < 8;
}

quant::BlockTuneResult rtn_block(Context& home, const quant::TuneLane& lane, BlockWeights& w,
                                 const quant::LayerFormats& selected, const Imatrix* im) {
  quant::BlockTuneResult r;
  std::vector<Tensor*> targets;
  std::vector<bool> weighted;  // searched with the imatrix
  for (auto& [name, t] : quant::block_linears(w)) {
    const auto it = selected.find(name);
    if (it == selected.end()) continue;
    const quant::QuantFormat& fmt = it->second;
    targets.push_back(t);
    weighted.push_back(im && has_opt_rtn(fmt));
    if (fmt.is_float()) {  // plain RTN: the QDQ at V = 0, coefficient 1
      r.layers.push_back(quant::make_tuned_linear(home, name, t, fmt));
      continue;
    }
    quant::TunedLinear L;
    L.name = name;
    L.shape = quant::make_qdq_shape(t->dim(0), t->dim(1), fmt.bits, fmt.group_size, fmt.sym);
    const int64_t ng = L.shape.out * L.shape.groups();
    L.scale = Tensor::empty({ng}, DType::F32, home);
    L.zero = Tensor::zeros({ng}, DType::F32, home);
    L.weight = t;
    r.layers.push_back(std::move(L));
  }
  quant::share_fused_global_scales(r.layers);
  const int64_t M = int64_t(r.layers.size());
  quant::TuneLane l = lane;  // the plan gives at most one rank per module
  AR_CHECK(!lane.parallel() || lane.world <= M, "search world exceeds the module count");
  const int P = lane.processes(), p = lane.procs ? lane.procs->rank() : 0;
  if (lane.procs) l = quant::TuneLane{};  // processes split the modules; each searches its own serially
  std::vector<Tensor> q(static_cast<size_t>(M));
  dispatch(home, l, [&](Context& ctx, int rank, int world) {
    for (int64_t m = M * (p * world + rank) / (P * world); m < M * (p * world + rank + 1) / (P * world); ++m) {
      auto& L = r.layers[size_t(m)];
      q[size_t(m)] = Tensor::empty(targets[size_t(m)]->shape(), DType::F32, ctx);
      quant::family(L).search(ctx, L, weighted[size_t(m)] ? imatrix_for(*im, L.name).data() : nullptr,
                              q[size_t(m)].f32());
    }
  });
  for (int64_t m = 0; lane.procs && m < M; ++m) {  // every process gets every module's result
    int owner = 0;  // the process whose range [o M / P, (o + 1) M / P) holds m
    while (M * (owner + 1) / P <= m) ++owner;
    auto& L = r.layers[size_t(m)];
    if (owner != p) q[size_t(m)] = Tensor::empty(targets[size_t(m)]->shape(), DType::F32, home);
    for (Tensor* t : {&q[size_t(m)], &L.scale, &L.zero}) lane.procs->broadcast(t->raw(), t->nbytes(), owner);
  }
  for (int64_t m = 0; m < M; ++m) *targets[size_t(m)] = q[size_t(m)].clone(home);  // copied back to the home block
  return r;
}

}  // namespace ar
