// SignRound through the floating-point schemes (quant/qdq_fp.h) on the synthetic Llama block:
// iters 0 is the reference QDQ (RTN) of each family; tuning V and the max-scale coefficient lowers the
// block-output error below RTN's; the kept weights are the best iterate's and the fp32 QDQ of the kept
// tunables; the coefficients stay in [0, 1]; the row-parallel forward equals the serial one (fp32 and
// bf16); the in-process lane writes the serial run's bits at worlds 1, 2 and 4. FP8_STATIC: the tuning
// forward reads every Linear's input through its activation QDQ, the coefficients of the maxima move
// in [0, 1] and set the kept input scales, the same bits at every world.
#include <array>
#include <cmath>
#include <cstring>

#include "block_fixture.h"
#include "quant/tune_linear.h"
#include "fp_schemes.h"
#include "core/dtype.h"
#include "parallel/devices.h"
#include "parallel/replica_group.h"

using namespace ar;
using namespace ar::quant;

using test::Fixture;
using test::FpScheme;
using test::kFpSchemes;

namespace {

std::vector<float> weights_of(const BlockWeights& w) {
  std::vector<float> v;
  for (const Tensor* t : {&w.wq, &w.wk, &w.wv, &w.wo, &w.wg, &w.wu, &w.wd}) v.insert(v.end(), t->f32(), t->f32() + t->numel());
  return v;
}

// The serial reference QDQ of W with the given tunables (null: V = 0, beta = 1).
std::vector<float> reference_qdq(const QuantFormat& fmt, const Tensor& W, const float* V = nullptr,
                                 const float* beta = nullptr) {
  FpQdqShape sh = fp_shape(fmt, W.dim(0), W.dim(1));
  if (sh.family == FpFamily::Nvfp4) sh.global_scale = nvfp4_global_scale(W.f32(), W.numel());
  std::vector<float> amax(size_t(sh.tiles())), out(size_t(W.numel()));
  fp_qdq_amax(sh, W.f32(), amax.data());
  fp_qdq_fwd(sh, W.f32(), V, beta, nullptr, amax.data(), out.data(), nullptr);
  return out;
}

// The maxima |x| of the four Linear inputs (q/k/v, o, gate/up, down) of the FP block over the pool.
std::array<float, 4> input_maxima(Fixture& f) {
  const auto c = test::fp_linear_inputs(f);
  const float* in[] = {c.h1o.x, c.attn.oo.x, c.h2o.x, c.mlp.ao.x};
  const int64_t width[] = {64, 64, 64, 128};
  std::array<float, 4> m{};
  for (int k = 0; k < 4; ++k)
    for (int64_t i = 0; i < f.n * f.T * width[k]; ++i) m[size_t(k)] = std::max(m[size_t(k)], std::fabs(in[k][i]));
  return m;
}

// SignRound's options with the hook that hands each Linear its input maximum (WeightTrack's role).
SignRoundOptions with_act_max(const std::array<float, 4>& m, SignRoundOptions o = {}) {
  o.fix_params = [m](Context&, TunedLinear& L) {
    const size_t k = L.name == "self_attn.o_proj" ? 1 : L.name == "mlp.down_proj" ? 3 : L.name.rfind("mlp.", 0) == 0 ? 2 : 0;
    L.act_max = m[k];
  };
  return o;
}

// The block MSE of weights `w` whose Linears read their inputs through the activation QDQ at `act`.
double mse_with_act(Fixture& f, const BlockWeights& w, const ActQdq<float>& act) {
  cpu::CpuOps ops{f.ctx};
  BlockRunner<cpu::CpuOps> r(ops, f.dims);
  BlockRunner<cpu::CpuOps>::Cache c;
  Tensor out = Tensor::empty({f.n, f.T, 64}, DType::F32, f.ctx);
  r.forward(w.ptrs(), f.aux(f.n), f.x.f32(), out.f32(), c, nullptr, &act);
  double s = 0;
  int64_t cnt = 0;
  for (int64_t i = 0; i < f.n * f.T; ++i) {
    if (!f.mask[size_t(i)]) continue;
    for (int64_t k = 0; k < 64; ++k) {
      const double d = double(out.f32()[i * 64 + k]) - double(f.y.f32()[i * 64 + k]);
      s += d * d;
    }
    cnt += 64;
  }
  return s / double(cnt);
}

ActQdq<float> act_of(const BlockTuneResult& r) {
  ActQdq<float> a;
  for (const TunedLinear& L : r.layers) a.s.push_back(L.input_scale);  // all seven, in slot order
  return a;
}

}  // namespace

// With the whole pool as the batch, iteration 0's loss is the RTN block's MSE with every Linear's input
// through its activation QDQ at coefficient 1 (an error the weight-only forward does not have).
TEST(SignRoundFp8Static, TheTuningForwardQuantizesTheActivations) {
  Fixture f;
  const auto m = input_maxima(f);
  SignRoundOptions o = with_act_max(m);
  o.batch_size = int(f.n);
  BlockWeights a = f.copy(), rtn = f.copy();
  const BlockTuneResult r = f.tune(a, test::fp8_static_format(), 2, 42, o);
  f.tune(rtn, test::fp_format(FpFamily::Fp8, 8, -1), 0);
  ActQdq<float> at1;
  at1.s.resize(7);
  const float in_max[7] = {m[0], m[0], m[0], m[1], m[2], m[2], m[3]};
  for (int k = 0; k < 7; ++k) at1.s[k] = fp8_static_input_scale(in_max[k]);
  const double with_act = mse_with_act(f, rtn, at1), weights_only = f.mse(rtn);
  EXPECT_NEAR(r.loss_first, with_act, 1e-4 * with_act);  // fp32 orders differ (see below)
  EXPECT_GT(std::fabs(with_act - weights_only), 1e-3 * weights_only) << "the activation QDQ changes nothing here";
}

// FP8_STATIC's options for the fixture: its input maxima, the whole pool as one batch, rate lr.
SignRoundOptions fp8_static_options(Fixture& f, double lr) {
  SignRoundOptions o = with_act_max(input_maxima(f));
  o.batch_size = int(f.n);
  o.lr = lr;
  return o;
}

// The coefficients stay in [0, 1] and move; each kept input scale is fp8_static_input_scale(max * coef)
// of the best iterate's coefficient, whose block MSE (with those scales) is loss_best.
TEST(SignRoundFp8Static, CoefficientsMoveAndSetTheKeptInputScales) {
  Fixture f;
  SignRoundOptions o = fp8_static_options(f, 0.05);
  BlockWeights a = f.copy();
  const BlockTuneResult r = f.tune(a, test::fp8_static_format(), 30, 3, o);
  ASSERT_EQ(r.layers.size(), 7u);
  int moved = 0;
  for (const TunedLinear& L : r.layers) {
    EXPECT_TRUE(L.act_coef >= 0.f && L.act_coef <= 1.f) << L.name << " " << L.act_coef;
    moved += L.act_coef != 1.f;
    EXPECT_EQ(L.input_scale, fp8_static_input_scale(L.act_max * L.act_coef)) << L.name;
  }
  EXPECT_GT(moved, 0);
  // 1e-4: the tuner's per-sample leaves and this whole-pool forward sum their GEMMs in different fp32
  // orders, and an E4M3 rounding of an activation flips now and then (1.25e-5 apart under the AVX2 cap).
  EXPECT_NEAR(mse_with_act(f, a, act_of(r)), r.loss_best, 1e-4 * r.loss_best);
  // --disable_minmax_tuning keeps them at 1 (AutoRound's act_max_scale sits in the min/max group).
  BlockWeights b = f.copy();
  o.enable_minmax_tuning = false;
  for (const TunedLinear& L : f.tune(b, test::fp8_static_format(), 5, 3, o).layers) EXPECT_EQ(L.act_coef, 1.f) << L.name;
}

// When the best iterate is the last one (its loss-only iteration), it is still live and nothing is
// restored: its coefficients, which rank 0's replica holds as plain values, must still reach the result.
// (They stayed at 1 while the weights had been tuned under the moved ones: the kept input scales then
// missed the tuned weights by 2% of the block MSE.) Two iterations: a step, then the loss-only one,
// which is the best here (lr 0.01; the assertion says so where a kernel's rounding changes that).
TEST(SignRoundFp8Static, LastIterateBestKeepsItsCoefficients) {
  Fixture f;
  SignRoundOptions o = fp8_static_options(f, 0.01);
  BlockWeights a = f.copy();
  const BlockTuneResult r = f.tune(a, test::fp8_static_format(), 2, 3, o);
  ASSERT_EQ(r.best_iter, 1) << "the case needs the second (loss-only) iteration to be the best";
  for (const TunedLinear& L : r.layers) {
    EXPECT_LT(L.act_coef, 1.f) << L.name << ": the first step moves every coefficient here (dL/ds > 0)";
    EXPECT_EQ(L.input_scale, fp8_static_input_scale(L.act_max * L.act_coef)) << L.name;
  }
  EXPECT_NEAR(mse_with_act(f, a, act_of(r)), r.loss_best, 1e-4 * r.loss_best);
  // Without --use_best_mse the result is always the live last iterate.
  o.use_best_mse = false;
  BlockWeights b = f.copy();
  for (const TunedLinear& L : f.tune(b, test::fp8_static_format(), 2, 3, o).layers) EXPECT_LT(L.act_coef, 1.f) << L.name;
}

TEST(SignRoundFp8Static, DeterministicWorldsWriteIdenticalWeightsAndScales) {
  Fixture f;
  const auto m = input_maxima(f);
  std::vector<Device> cpus;
  for (int i = 0; i < 4; ++i) cpus.push_back({DeviceKind::CPU, i});
  parallel::ReplicaGroup group(parallel::cpu_device_slots(parallel::CpuTopology::detect(), cpus));
  SignRoundOptions o = with_act_max(m);
  o.lr = 0.05;
  BlockWeights serial = f.copy();
  const BlockTuneResult rs = f.tune(serial, test::fp8_static_format(), 10, 42, o);
  for (int W : {2, 4}) {
    BlockWeights a = f.copy();
    const BlockTuneResult r = f.tune(a, test::fp8_static_format(), 10, 42, o, {&group, W, {}});
    EXPECT_EQ(r.loss_best, rs.loss_best) << "world " << W;
    EXPECT_TRUE(weights_of(a) == weights_of(serial)) << "world " << W;
    for (size_t l = 0; l < r.layers.size(); ++l)
      EXPECT_EQ(r.layers[l].input_scale, rs.layers[l].input_scale) << r.layers[l].name << " world " << W;
  }
}

TEST(SignRoundFp, ZeroItersIsTheReferenceQdq) {
  Fixture f;
  for (const FpScheme& s : kFpSchemes) {
    BlockWeights a = f.copy();
    f.tune(a, s.fmt, 0);
    const std::vector<float> ref = reference_qdq(s.fmt, f.w.wd);
    for (int64_t i = 0; i < a.wd.numel(); ++i) ASSERT_EQ(a.wd.f32()[i], ref[size_t(i)]) << s.name << " at " << i;
  }
}

TEST(SignRoundFp, TuningBeatsRtnOnBlockOutput) {
  Fixture f;
  for (const FpScheme& s : kFpSchemes) {
    BlockWeights rtn = f.copy(), sr = f.copy();
    f.tune(rtn, s.fmt, 0);
    const BlockTuneResult r = f.tune(sr, s.fmt, 100);
    const double e_rtn = f.mse(rtn), e_sr = f.mse(sr);
    EXPECT_LT(r.loss_best, r.loss_first) << s.name;
    // 8-bit elements leave little to tune (FP8 per tensor gains ~5% here), 4-bit ones 30-40%.
    EXPECT_LT(e_sr, (s.fmt.bits == 8 ? 0.98 : 0.9) * e_rtn) << s.name << ": SignRound " << e_sr << " vs RTN " << e_rtn;
    std::printf("%-12s block MSE RTN %.6g -> SignRound %.6g (best at iter %d)\n", s.name, e_rtn, e_sr, r.best_iter);
  }
}

// With the whole pool as the batch every iteration's loss is that iterate's block MSE, so the kept
// weights' MSE is loss_best; and they are the serial QDQ of the kept V and beta, bit for bit.
TEST(SignRoundFp, KeptWeightsAreTheQdqOfTheBestIterate) {
  Fixture f;
  for (const FpScheme& s : kFpSchemes) {
    BlockWeights a = f.copy();
    SignRoundOptions o;
    o.batch_size = int(f.n);
    o.lr = 0.2;
    const BlockTuneResult r = f.tune(a, s.fmt, 9, 42, o);
    EXPECT_NEAR(f.mse(a), r.loss_best, 1e-5 * r.loss_best) << s.name;
    const TunedLinear& L = r.layers.back();  // mlp.down_proj
    ASSERT_EQ(L.name, "mlp.down_proj");
    const std::vector<float> ref = reference_qdq(s.fmt, f.w.wd, L.V.f32(), L.beta.f32());
    for (int64_t i = 0; i < a.wd.numel(); ++i) ASSERT_EQ(a.wd.f32()[i], ref[size_t(i)]) << s.name << " at " << i;
  }
}

TEST(SignRoundFp, MaxScaleCoefficientsMoveWithinTheUnitInterval) {
  Fixture f;
  for (const FpScheme& s : kFpSchemes) {
    BlockWeights a = f.copy();
    SignRoundOptions o;
    o.lr = 0.05;
    const BlockTuneResult r = f.tune(a, s.fmt, 30, 3, o);
    int64_t moved = 0;
    for (const TunedLinear& L : r.layers) {
      ASSERT_TRUE(L.fp.has_value());
      for (int64_t i = 0; i < L.beta.numel(); ++i) {
        const float v = L.beta.f32()[i];
        ASSERT_TRUE(v >= 0.f && v <= 1.f) << s.name << " " << v;
        moved += v != 1.f;
      }
    }
    EXPECT_GT(moved, 0) << s.name;
  }
}

TEST(SignRoundFp, RowParallelForwardEqualsSerial) {
  Context ctx{Device{}, 2};
  const Tensor W = test::random_tensor(ctx, {96, 128}, 5, 0.05);
  const Tensor V = test::random_tensor(ctx, {96, 128}, 6, 0.3);
  for (const FpScheme& s : kFpSchemes) {
    FpQdqShape sh = fp_shape(s.fmt, 96, 128);
    sh.global_scale = sh.family == FpFamily::Nvfp4 ? nvfp4_global_scale(W.f32(), W.numel()) : 0.f;
    ASSERT_EQ(sh.padded_in(), 128);
    std::vector<float> amax(size_t(sh.tiles())), beta(amax.size()), a(size_t(W.numel())), b(a.size()),
        sa(amax.size()), sb(amax.size());
    for (size_t t = 0; t < beta.size(); ++t) beta[t] = 0.5f + 0.5f * float(t % 7) / 7.f;
    std::vector<uint16_t> h(a.size());
    fp_qdq_amax(sh, W.f32(), amax.data());
    fp_qdq_fwd(sh, W.f32(), V.f32(), beta.data(), nullptr, amax.data(), a.data(), sa.data());
    fp_qdq_fwd(ctx, sh, W.f32(), V.f32(), beta.data(), nullptr, amax.data(), b.data(), nullptr, sb.data());
    fp_qdq_fwd(ctx, sh, W.f32(), V.f32(), beta.data(), nullptr, amax.data(), nullptr, h.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << s.name;
    EXPECT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size() * 4)) << s.name;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(h[i], f32_to_bf16(a[i])) << s.name << " at " << i;
  }
}

TEST(SignRoundFp, DeterministicWorldsWriteIdenticalWeights) {
  Fixture f;
  std::vector<Device> cpus;
  for (int i = 0; i < 4; ++i) cpus.push_back({DeviceKind::CPU, i});
  parallel::ReplicaGroup group(parallel::cpu_device_slots(parallel::CpuTopology::detect(), cpus));
  for (const FpScheme& s : {kFpSchemes[0], kFpSchemes[3], kFpSchemes[6]}) {
    BlockWeights serial = f.copy();
    const BlockTuneResult rs = f.tune(serial, s.fmt, 10);
    for (int W : {1, 2, 4}) {
      BlockWeights a = f.copy();
      const BlockTuneResult r = f.tune(a, s.fmt, 10, 42, {}, {&group, W, {}});
      EXPECT_EQ(r.loss_best, rs.loss_best) << s.name << " world " << W;
      EXPECT_TRUE(weights_of(a) == weights_of(serial)) << s.name << " world " << W << " differs from serial";
    }
  }
}

// lm_head's layer-wise tuning (quant/tune_linear.h) under FP8_STATIC: iteration 0's loss is the RTN
// weight on the activation QDQ of x_in at coefficient 1 against the FP Linear on x_fp; the coefficient
// moves in [0, 1] and sets input_scale.
TEST(SignRoundFp8Static, LinearTuningQuantizesItsInput) {
  Context ctx{Device{}, 2};
  const int64_t n = 4, T = 8, in = 64, out = 48;
  const Tensor x_in = test::random_tensor(ctx, {n, T, in}, 31, 1.0), x_fp = test::random_tensor(ctx, {n, T, in}, 32, 1.0);
  const Tensor w0 = test::random_tensor(ctx, {out, in}, 33, 0.1);
  std::vector<uint8_t> mask(size_t(n * T), 1);
  float amax = 0;
  for (int64_t i = 0; i < x_in.numel(); ++i) amax = std::max(amax, std::fabs(x_in.f32()[i]));
  SignRoundOptions o;
  o.batch_size = int(n);
  o.lr = 0.05;
  Tensor rtn = w0.clone(ctx), w = w0.clone(ctx);
  signround_tune_linear(ctx, "lm_head", rtn, test::fp8_static_format(), x_in, x_fp, T, mask, [] { SignRoundOptions z; z.iters = 0; return z; }(), amax);
  o.iters = 20;
  const BlockTuneResult r = signround_tune_linear(ctx, "lm_head", w, test::fp8_static_format(), x_in, x_fp, T, mask, o, amax);
  // The loss at iteration 0, composed here.
  const float s = fp8_static_input_scale(amax);
  std::vector<float> xq(size_t(x_in.numel()));
  cpu::act_qdq_fwd(ctx, x_in.f32(), s, xq.data(), x_in.numel());
  std::vector<float> y(size_t(n * T * out)), yf(y.size());
  cpu::gemm(ctx, false, true, n * T, out, in, 1.f, xq.data(), in, rtn.f32(), in, 0.f, y.data(), out);
  cpu::gemm(ctx, false, true, n * T, out, in, 1.f, x_fp.f32(), in, w0.f32(), in, 0.f, yf.data(), out);
  double l0 = 0;
  for (size_t i = 0; i < y.size(); ++i) l0 += (double(y[i]) - yf[i]) * (double(y[i]) - yf[i]);
  l0 /= double(y.size());
  EXPECT_NEAR(r.loss_first, l0, 1e-5 * l0);
  const TunedLinear& L = r.layers[0];
  EXPECT_TRUE(L.act_coef >= 0.f && L.act_coef < 1.f) << L.act_coef;
  EXPECT_EQ(L.input_scale, fp8_static_input_scale(amax * L.act_coef));
}
