// One Gated DeltaNet layer (Qwen3-Next's linear attention) composed from the reference ops in double,
// against transformers' output for the same weights and input (tests/data/delta_net, made by
// tools/make_delta_net_goldens.py): the projections split per key-head group as transformers'
// fix_query_key_value_ordering does, the causal depthwise conv with SiLU over [q, k, v], q and k
// l2-normalized and q scaled, the decay and beta from a and b, the gated delta rule, the gated RMSNorm
// with z, out_proj. The block module (model/attention_delta.h) on the reference ops in double and on the
// fp32 CPU ops gives the same output.
#include <cmath>
#include <nlohmann/json.hpp>

#include "golden_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "kernels/ref/delta_net_ref.h"
#include "kernels/ref/gated_delta_ref.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/ref_ops.h"
#include "model/attention_delta.h"
#include "test_util.h"

using namespace ar;
using namespace ar::test;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/delta_net";

struct LayerShape {
  int64_t hidden, Hk, Hv, Dk, Dv, K;
  double eps;
  int64_t key_dim() const { return Hk * Dk; }
  int64_t value_dim() const { return Hv * Dv; }
  int64_t g() const { return Hv / Hk; }
};

struct LayerWeights {
  std::vector<double> qkvz, ba, conv, dt_bias, A_log, norm, out;
};

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// y [B, T, hidden] of x [B, T, hidden].
std::vector<double> layer_forward(const LayerShape& s, const LayerWeights& w, const std::vector<double>& x, int64_t B,
                                  int64_t T) {
  const int64_t n = B * T, G = s.g(), per_head = 2 * s.Dk + 2 * G * s.Dv, conv_dim = 2 * s.key_dim() + s.value_dim();
  std::vector<double> qkvz(size_t(n * per_head * s.Hk)), ba(size_t(n * 2 * s.Hv));
  ref::linear_fwd(x.data(), w.qkvz.data(), static_cast<const double*>(nullptr), qkvz.data(), n, s.hidden, per_head * s.Hk);
  ref::linear_fwd(x.data(), w.ba.data(), static_cast<const double*>(nullptr), ba.data(), n, s.hidden, 2 * s.Hv);
  // Per key head hk: [q Dk | k Dk | v G Dv | z G Dv] and [b G | a G]; the conv's channels are [q | k | v].
  std::vector<double> mixed(size_t(n * conv_dim)), z(size_t(n * s.value_dim())), a(size_t(n * s.Hv)), b(a.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t hk = 0; hk < s.Hk; ++hk) {
      const double* src = &qkvz[size_t((r * s.Hk + hk) * per_head)];
      double* m = &mixed[size_t(r * conv_dim)];
      std::copy(src, src + s.Dk, m + hk * s.Dk);
      std::copy(src + s.Dk, src + 2 * s.Dk, m + s.key_dim() + hk * s.Dk);
      std::copy(src + 2 * s.Dk, src + 2 * s.Dk + G * s.Dv, m + 2 * s.key_dim() + hk * G * s.Dv);
      std::copy(src + 2 * s.Dk + G * s.Dv, src + per_head, &z[size_t(r * s.value_dim() + hk * G * s.Dv)]);
      const double* bas = &ba[size_t((r * s.Hk + hk) * 2 * G)];
      std::copy(bas, bas + G, &b[size_t(r * s.Hv + hk * G)]);
      std::copy(bas + G, bas + 2 * G, &a[size_t(r * s.Hv + hk * G)]);
    }
  std::vector<double> conv(mixed.size());
  ref::causal_conv_silu_fwd(mixed.data(), w.conv.data(), conv.data(), static_cast<double*>(nullptr), B, T, conv_dim, s.K);
  std::vector<double> q(size_t(n * s.key_dim())), k(q.size()), v(size_t(n * s.value_dim()));
  for (int64_t r = 0; r < n; ++r) {
    const double* c = &conv[size_t(r * conv_dim)];
    std::copy(c, c + s.key_dim(), &q[size_t(r * s.key_dim())]);
    std::copy(c + s.key_dim(), c + 2 * s.key_dim(), &k[size_t(r * s.key_dim())]);
    std::copy(c + 2 * s.key_dim(), c + conv_dim, &v[size_t(r * s.value_dim())]);
  }
  ref::l2norm_fwd(q.data(), q.data(), n * s.Hk, s.Dk, 1 / std::sqrt(double(s.Dk)));
  ref::l2norm_fwd(k.data(), k.data(), n * s.Hk, s.Dk);
  std::vector<double> g(a.size()), beta(a.size()), core(v.size()), normed(v.size());
  ref::decay_beta_fwd(a.data(), b.data(), w.A_log.data(), w.dt_bias.data(), g.data(), beta.data(), n, s.Hv);
  ref::gated_delta_fwd(ref::DeltaShape{B, T, s.Hk, s.Hv, s.Dk, s.Dv}, q.data(), k.data(), v.data(), g.data(), beta.data(),
                       core.data());
  ref::gated_rmsnorm_fwd(core.data(), z.data(), w.norm.data(), normed.data(), n * s.Hv, s.Dv, s.eps);
  std::vector<double> y(size_t(n * s.hidden));
  ref::linear_fwd(normed.data(), w.out.data(), static_cast<const double*>(nullptr), y.data(), n, s.value_dim(), s.hidden);
  return y;
}

// The module's output for x through Ops (T = double or float).
template <class Ops>
std::vector<double> module_forward(Ops& ops, const LayerShape& s, const LayerWeights& w, const std::vector<double>& x,
                                   int64_t B, int64_t T) {
  using R = typename Ops::Real;
  BlockDims d;
  d.C = s.hidden;
  d.eps = s.eps;
  d.attn = AttnKind::DeltaNet;
  d.delta = {s.Hk, s.Hv, s.Dk, s.Dv, s.K};
  const auto cast = [](const std::vector<double>& v) { return std::vector<R>(v.begin(), v.end()); };
  const auto qkvz = cast(w.qkvz), ba = cast(w.ba), conv = cast(w.conv), dt = cast(w.dt_bias), A = cast(w.A_log),
             norm = cast(w.norm), out = cast(w.out), xr = cast(x);
  BlockPtrs<const R*> p;
  p.attn = AttnKind::DeltaNet;
  p.in_qkvz = qkvz.data(); p.in_ba = ba.data(); p.conv = conv.data(); p.dt_bias = dt.data(); p.A_log = A.data();
  p.dnorm = norm.data(); p.wo = out.data();
  BlockAux<R> aux{B, T};
  std::vector<R> y(size_t(B * T * s.hidden));
  typename DeltaNetAttention<Ops>::Cache c;
  DeltaNetAttention<Ops>(ops, d).forward(p, aux, ops.operand(xr.data(), int64_t(xr.size())), y.data(), c, nullptr);
  return {y.begin(), y.end()};
}

TEST(DeltaNetLayer, MatchesTransformers) {
  const nlohmann::json j = nlohmann::json::parse(read_text_file(kDir + "/layer.json"));
  const LayerShape s{j["hidden_size"], j["linear_num_key_heads"], j["linear_num_value_heads"], j["linear_key_head_dim"],
                     j["linear_value_head_dim"], j["linear_conv_kernel_dim"], j["rms_norm_eps"]};
  auto f = SafetensorsFile::open(kDir + "/layer.safetensors");
  const int64_t B = 2, T = 70, conv_dim = 2 * s.key_dim() + s.value_dim();
  const auto rd = [&](const char* name, int64_t count) { return to_double(read_f32(*f, name, size_t(count))); };
  const LayerWeights w{rd("in_proj_qkvz", (2 * s.key_dim() + 2 * s.value_dim()) * s.hidden),
                       rd("in_proj_ba", 2 * s.Hv * s.hidden), rd("conv1d", conv_dim * s.K), rd("dt_bias", s.Hv),
                       rd("A_log", s.Hv), rd("norm", s.Dv), rd("out_proj", s.hidden * s.value_dim())};
  const auto x = rd("x", B * T * s.hidden), want = rd("y", B * T * s.hidden);
  ref::RefOps<double> rops;
  Context ctx(Device{}, 2);
  cpu::CpuOps cops{ctx};
  const std::pair<const char*, std::vector<double>> runs[] = {
      {"composition", layer_forward(s, w, x, B, T)}, {"module, double", module_forward(rops, s, w, x, B, T)},
      {"module, fp32 CPU", module_forward(cops, s, w, x, B, T)}};
  for (const auto& [what, y] : runs) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      worst = std::max(worst, std::abs(y[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_LT(worst, 2e-5 * scale) << what << ", largest output " << scale;  // transformers runs fp32, chunked
    EXPECT_GT(scale, 1.0);
  }
}

}  // namespace
