// --amp (bf16 GEMM operands, fp32 accumulation): the Linear kernels against the double reference on the
// bf16-rounded operands, the bf16 QDQ writer against the fp32 one, the tuning's determinism (bits
// independent of the thread count and of the world) and its quality next to fp32, and the CLI's choice.
// Tolerance of the kernels: every output is a sum of K exact bf16 products accumulated in fp32, so
// |got - ref| <= 1.01 (K + 2) 2^-24 sum |terms| (the standard bound for recursive fp32 summation, plus the
// one rounding of the stored result); outputs that also add a bias or accumulate count those terms too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "block_fixture.h"
#include "core/context.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/ref/matmul_ref.h"
#include "parallel/devices.h"
#include "parallel/replica_group.h"
#include "quant/qdq.h"
#include "test_util.h"

using namespace ar;

namespace {

#define AR_REQUIRE_BF16() \
  if (!cpu::bf16_gemm_supported()) GTEST_SKIP() << "no bf16 GEMMs here: " << cpu::bf16_support_summary()

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

// got vs the double reference `ref`, with `mag` the double sums of |terms| of each output.
void expect_bound(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
                  const std::vector<double>& mag, int64_t K) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 1.01 * double(K + 2) * std::ldexp(1.0, -24) * mag[i];
    if (std::abs(double(got[i]) - ref[i]) > bound && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", reference " << ref[i] << ", bound " << bound;
  }
}

std::vector<double> abs_of(const std::vector<float>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(double(v[i]));
  return a;
}
}  // namespace

TEST(AmpLinear, ForwardAndBackwardMatchDoubleReferenceOnRoundedOperands) {
  AR_REQUIRE_BF16();
  Context ctx(Device{}, 2);
  // Shapes: one-unit GEMMs and multi-unit ones (>= 2^24 multiply-adds: cut into row or column units).
  // {64, 2048, 512}: column units (short M), which read the plain operands.
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{7, 33, 5}, {96, 64, 160}, {512, 256, 384}, {64, 2048, 512}}) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(in) + "->" + std::to_string(out));
    auto x = test::randn<float>(size_t(n * in), 1, 1.0), W = test::randn<float>(size_t(out * in), 2, 0.1);
    auto b = test::randn<float>(size_t(out), 3, 0.5), dy = test::randn<float>(size_t(n * out), 4, 1.0);
    auto dW0 = test::randn<float>(size_t(out * in), 5, 0.01), dx0 = test::randn<float>(size_t(n * in), 6, 0.1);
    const auto xr = rounded(x), Wr = rounded(W), dyr = rounded(dy);
    std::vector<uint16_t> Wb(W.size()), xb(x.size());
    for (size_t i = 0; i < W.size(); ++i) Wb[i] = f32_to_bf16(W[i]);
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
    // Forward, with the operands given in bf16 and rounded inside: the same bits ...
    // ... and with W^T and W packed for the forward and the input gradient (cpu::PackedB): the same bits.
    std::vector<uint16_t> WbT(Wb.size());
    cpu::transpose_bf16(ctx, Wb.data(), WbT.data(), out, in);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) ASSERT_EQ(WbT[size_t(i * out + o)], Wb[size_t(o * in + i)]);
    cpu::PackedB fwd, bwd;
    fwd.pack(ctx, Wb.data(), out, in, true);
    bwd.pack(ctx, Wb.data(), out, in, false);
    const cpu::Bf16Weight plain{Wb.data()}, packed{Wb.data(), &fwd, &bwd};
    std::vector<float> y(size_t(n * out)), y2(y.size()), y3(y.size());
    cpu::linear_fwd_bf16(ctx, x.data(), xb.data(), W.data(), &plain, b.data(), y.data(), n, in, out);
    cpu::linear_fwd_bf16(ctx, x.data(), nullptr, W.data(), nullptr, b.data(), y2.data(), n, in, out);
    cpu::linear_fwd_bf16(ctx, x.data(), xb.data(), W.data(), &packed, b.data(), y3.data(), n, in, out);
    EXPECT_EQ(y, y2);
    EXPECT_EQ(y, y3);
    std::vector<double> yr(y.size()), ymag(y.size());
    ref::linear_fwd<double>(test::cast<double>(xr).data(), test::cast<double>(Wr).data(), test::cast<double>(b).data(),
                            yr.data(), n, in, out);
    ref::linear_fwd<double>(abs_of(xr).data(), abs_of(Wr).data(), abs_of(b).data(), ymag.data(), n, in, out);
    expect_bound("y", y, yr, ymag, in + 1);
    // Backward: dx accumulated onto dx0, dW accumulated onto dW0, db from zero.
    std::vector<float> dx = dx0, dW = dW0, db(size_t(out), 0.f);
    cpu::linear_bwd_bf16(ctx, dy.data(), nullptr, x.data(), nullptr, W.data(), &plain, dx.data(), true, dW.data(), true,
                         db.data(), n, in, out);
    // dx through the packed weight operand.
    std::vector<float> dxt = dx0;
    cpu::linear_bwd_bf16(ctx, dy.data(), nullptr, x.data(), nullptr, W.data(), &packed, dxt.data(), true, nullptr, false,
                         nullptr, n, in, out);
    EXPECT_EQ(dx, dxt);
    // dW written (not accumulated) equals accumulating onto zeros, bit for bit.
    std::vector<float> fresh(dW.size(), 7.f), zero_acc(dW.size(), 0.f);
    cpu::linear_bwd_bf16(ctx, dy.data(), nullptr, x.data(), xb.data(), W.data(), nullptr, nullptr, false, fresh.data(), false,
                         nullptr, n, in, out);
    cpu::linear_bwd_bf16(ctx, dy.data(), nullptr, x.data(), nullptr, W.data(), nullptr, nullptr, false, zero_acc.data(), true,
                         nullptr, n, in, out);
    EXPECT_EQ(fresh, zero_acc);
    auto dxr = test::cast<double>(dx0), dWr = test::cast<double>(dW0);
    std::vector<double> dbr(size_t(out), 0.0), dxm = abs_of(dx0), dWm = abs_of(dW0), dbm(size_t(out), 0.0);
    ref::linear_bwd<double>(test::cast<double>(dyr).data(), test::cast<double>(xr).data(), test::cast<double>(Wr).data(),
                            dxr.data(), true, dWr.data(), nullptr, n, in, out);
    ref::linear_bwd<double>(abs_of(dyr).data(), abs_of(xr).data(), abs_of(Wr).data(), dxm.data(), true, dWm.data(),
                            nullptr, n, in, out);
    // db sums the fp32 dy (not rounded): n terms.
    ref::linear_bwd<double>(test::cast<double>(dy).data(), test::cast<double>(x).data(), test::cast<double>(W).data(),
                            nullptr, false, nullptr, dbr.data(), n, in, out);
    ref::linear_bwd<double>(abs_of(dy).data(), abs_of(x).data(), abs_of(W).data(), nullptr, false, nullptr, dbm.data(),
                            n, in, out);
    expect_bound("dx", dx, dxr, dxm, out + 1);
    expect_bound("dx (W^T operand)", dxt, dxr, dxm, out + 1);
    expect_bound("dW", dW, dWr, dWm, n + 1);
    expect_bound("db", db, dbr, dbm, n);
  }
}

TEST(AmpQdq, Bf16OutputIsTheRoundedFp32Output) {
  Context ctx(Device{}, 2);
  for (bool sym : {true, false})
    for (int bits : {2, 4, 8}) {
      const auto sh = quant::make_qdq_shape(48, 200, bits, 32, sym);  // a partial last group
      const int64_t ng = sh.out * sh.groups();
      auto W = test::randn<float>(size_t(sh.out * sh.in), 7, 0.05);
      auto V = test::randn<float>(size_t(sh.out * sh.groups() * sh.group), 8, 0.2);
      auto al = test::randn<float>(size_t(ng), 9, 0.1), be = test::randn<float>(size_t(ng), 10, 0.1);
      for (auto& a : al) a += 1.f;
      for (auto& b : be) b += 0.9f;
      const size_t G = static_cast<size_t>(ng);
      std::vector<float> lo(G), hi(G), s1(G), z1(G), s2(G), z2(G);
      quant::qdq_minmax(ctx, sh, W.data(), lo.data(), hi.data());
      std::vector<float> f(W.size());
      std::vector<uint16_t> h(W.size());
      quant::qdq_fwd(ctx, sh, W.data(), V.data(), al.data(), be.data(), lo.data(), hi.data(), f.data(), s1.data(), z1.data());
      quant::qdq_fwd(ctx, sh, W.data(), V.data(), al.data(), be.data(), lo.data(), hi.data(), h.data(), s2.data(), z2.data());
      EXPECT_EQ(s1, s2);
      EXPECT_EQ(z1, z2);
      for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], f32_to_bf16(f[i])) << "bits " << bits << " sym " << sym << " at " << i;
    }
}

namespace {
// A block big enough that its GEMMs are cut into several units (so threads could change the order),
// small enough for a unit test: C 256, I 1024, 4 samples of 256 tokens.
struct WideBlock {
  Context ctx{Device{}, 2};
  BlockDims d;
  BlockWeights w;
  int64_t n = 4, T = 256;
  std::vector<float> cs, sn;
  std::vector<int32_t> pos;
  std::vector<uint8_t> mask;
  Tensor x, y;
  WideBlock() {
    d.C = 256; d.I = 1024; d.H = 4; d.Hkv = 2; d.D = 64; d.eps = 1e-5;
    auto rnd = [&](Shape s, uint32_t seed, double sd, double mean = 0) { return test::random_tensor(ctx, s, seed, sd, mean); };
    w.ln1 = rnd({256}, 1, 0.1, 1); w.ln2 = rnd({256}, 2, 0.1, 1);
    w.wq = rnd({256, 256}, 3, 0.06); w.wk = rnd({128, 256}, 4, 0.06); w.wv = rnd({128, 256}, 5, 0.06);
    w.wo = rnd({256, 256}, 6, 0.06); w.wg = rnd({1024, 256}, 7, 0.06); w.wu = rnd({1024, 256}, 8, 0.06);
    w.wd = rnd({256, 1024}, 9, 0.03);
    w.tensors = block_tensors(d);
    test::rope_tables(T, d.D, cs, sn);
    for (int64_t i = 0; i < n * T; ++i) pos.push_back(int32_t(i % T));
    mask.assign(size_t(n * T), 1);
    x = rnd({n, T, 256}, 10, 1.0).to(DType::BF16, ctx);  // stored in bf16, as the pipeline does under amp
    y = rnd({n, T, 256}, 11, 1.0).to(DType::BF16, ctx);
  }
  BlockWeights copy() { return quant::clone_block(w, ctx); }
  std::vector<float> tune(Context& c, const quant::TuneLane& lane = {}) {
    BlockWeights b = copy();
    quant::SignRoundOptions o;
    o.iters = 3;
    o.batch_size = 4;
    o.amp = true;
    quant::signround_tune_block(c, d, b, {4, 128, true}, {1, T, pos.data(), cs.data(), sn.data(), nullptr}, x, y, mask,
                                o, lane);
    std::vector<float> v;
    for (const Tensor* t : {&b.wq, &b.wk, &b.wv, &b.wo, &b.wg, &b.wu, &b.wd}) v.insert(v.end(), t->f32(), t->f32() + t->numel());
    return v;
  }
};
}  // namespace

TEST(AmpTuning, BitsIndependentOfThreadCountAndWorld) {
  AR_REQUIRE_BF16();
  WideBlock f;
  Context one(Device{}, 1);
  const auto ref = f.tune(one);
  EXPECT_TRUE(f.tune(f.ctx) == ref) << "2 threads differ from 1";
  parallel::ReplicaGroup group(parallel::cpu_device_slots(parallel::CpuTopology::detect(),
                                                          {{DeviceKind::CPU, 0}, {DeviceKind::CPU, 1}}));
  EXPECT_TRUE(f.tune(f.ctx, {&group, 2, {}}) == ref) << "world 2 differs from serial";
}

TEST(AmpTuning, QualityAtParityWithFp32) {
  AR_REQUIRE_BF16();
  test::Fixture f;
  BlockWeights a = f.copy(), b = f.copy(), rtn = f.copy();
  quant::SignRoundOptions amp;
  amp.amp = true;
  f.tune(a, {4, 32, false}, 40);
  f.tune(b, {4, 32, false}, 40, 42, amp);
  f.tune(rtn, {4, 32, false}, 0);
  const double m32 = f.mse(a), m16 = f.mse(b), mr = f.mse(rtn);
  EXPECT_LT(m32, 0.9 * mr);
  EXPECT_LT(m16, 0.9 * mr);
  EXPECT_NEAR(m16, m32, 0.05 * m32);  // bf16 operands: a few percent at most on the block MSE
}
