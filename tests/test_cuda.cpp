// The CUDA backend (kernels/cuda/) against the CPU path and the double reference. Tests that need a GPU
// skip with one line when none is visible; the host logic (device lookup and its errors) runs anywhere.
#include <cmath>
#include <fstream>
#include <map>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "block_case.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/block_kernels.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/qdq_int.h"
#include "kernels/cuda/sign_step.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/ref_ops.h"
#include "model/block_impl.h"
#include "quant/qdq_ref.h"
#include "quant/sign_step.h"
#include "cuda_test_util.h"
#include "test_util.h"

using namespace ar;

namespace {

// Empty when a GPU is visible, else the runtime's reason.
std::string no_gpu() {
  std::string why;
  return cuda::device_count(&why) > 0 ? std::string() : why;
}

#define AR_REQUIRE_GPU()                                                          \
  do {                                                                            \
    if (const std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

using test::download;
using test::expect_same_bits;
using test::uniform;

}  // namespace

// Whether the process has the shared library `name` mapped (/proc/self/maps).
static bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

// cuBLASLt is not linked: a process maps it when the backend first asks for it (a CPU-only run of a
// CUDA build never does), and the table then holds every call. Needs no GPU, only the toolkit's library
// (the CI machines have it); where the library is missing the error names it.
TEST(CudaRuntime, CublasLtIsLoadedOnFirstUse) {
  EXPECT_FALSE(mapped("libcublasLt")) << "cuBLASLt mapped before any use (linked?)";
  EXPECT_FALSE(mapped("libcudart.so")) << "the shared CUDA runtime is mapped (the build links it statically)";
  try {
    const cuda::CublasLt& lt = cuda::cublaslt();
    EXPECT_TRUE(mapped("libcublasLt"));
    for (const void* p : {reinterpret_cast<const void*>(lt.create), reinterpret_cast<const void*>(lt.matmul),
                          reinterpret_cast<const void*>(lt.heuristic), reinterpret_cast<const void*>(lt.destroy)})
      EXPECT_NE(p, nullptr);
    EXPECT_EQ(&lt, &cuda::cublaslt()) << "loaded once";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuBLASLt: cannot load libcublasLt.so."), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, RefusesADeviceItCannotSeeNamingIt) {
  std::string why;
  const int n = cuda::device_count(&why);
  try {
    cuda::DeviceContext ctx(n);
    ADD_FAILURE() << "cuda:" << n << " was accepted with " << n << " devices visible";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("cuda:" + std::to_string(n) + ": ", 0), 0u) << msg;
    if (n == 0) EXPECT_NE(msg.find("no CUDA device visible"), std::string::npos) << msg;
    else EXPECT_NE(msg.find("no such device (" + std::to_string(n) + " visible)"), std::string::npos) << msg;
  }
}

TEST(CudaDevice, AllocatorReusesBlocksAndNamesTheDeviceWhenFull) {
  AR_REQUIRE_GPU();
  cuda::DeviceContext ctx(0);
  void* first = ctx.alloc<float>(1 << 20).data();
  EXPECT_EQ(ctx.allocator().cached(), size_t(4) << 20);
  EXPECT_EQ(ctx.alloc<float>(1 << 20).data(), first);
  try {
    (void)ctx.alloc<char>(int64_t(1) << 50);
    ADD_FAILURE() << "a petabyte was allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of cuda:0 device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ctx.allocator().in_use(), 0u);
}

struct QdqCase {
  int64_t out, in, group;
  int bits;
  bool sym;
};
void PrintTo(const QdqCase& c, std::ostream* os) {
  *os << c.out << "x" << c.in << " g" << c.group << " W" << c.bits << (c.sym ? " sym" : " asym");
}

class CudaQdq : public ::testing::TestWithParam<QdqCase> {};

// Forward (fp32 and bf16 outputs, scales, zeros) and backward (dV, dalpha, dbeta) bit for bit against
// qdq_ref.h's float path, with clamped codes, coefficients outside [0, 1] and a padded last group.
TEST_P(CudaQdq, ForwardAndBackwardEqualTheCpuBitForBit) {
  AR_REQUIRE_GPU();
  const QdqCase c = GetParam();
  quant::QdqShape sh;
  sh.out = c.out;
  sh.in = c.in;
  sh.group = c.group > 0 ? c.group : c.in;
  sh.bits = c.bits;
  sh.sym = c.sym;
  const int64_t ng = sh.groups(), vw = ng * sh.group, nw = sh.out * sh.in, nv = sh.out * vw, nk = sh.out * ng;
  const auto W = uniform(size_t(nw), -1.f, 1.f, 1), V = uniform(size_t(nv), -0.6f, 0.6f, 2);
  const auto alpha = uniform(size_t(nk), 0.4f, 1.1f, 3), beta = uniform(size_t(nk), 0.4f, 1.1f, 4);
  const auto dWhat = uniform(size_t(nw), -1.f, 1.f, 5);
  std::vector<float> lo(static_cast<size_t>(nk)), hi(static_cast<size_t>(nk));
  quant::qdq_minmax<float>(sh, W.data(), lo.data(), hi.data(), 0, sh.out);

  std::vector<float> What(static_cast<size_t>(nw)), scale(static_cast<size_t>(nk)), zero(static_cast<size_t>(nk)), dV(static_cast<size_t>(nv), 0.f);
  std::vector<float> da(static_cast<size_t>(nk)), db(static_cast<size_t>(nk));
  std::vector<uint16_t> What16(static_cast<size_t>(nw));
  quant::qdq_fwd<float>(sh, W.data(), V.data(), alpha.data(), beta.data(), lo.data(), hi.data(), What.data(),
                        scale.data(), zero.data(), 0, sh.out);
  quant::qdq_fwd<float, uint16_t>(sh, W.data(), V.data(), alpha.data(), beta.data(), lo.data(), hi.data(),
                                  What16.data(), nullptr, nullptr, 0, sh.out);
  quant::qdq_bwd<float>(sh, W.data(), V.data(), alpha.data(), beta.data(), lo.data(), hi.data(), dWhat.data(),
                        dV.data(), da.data(), db.data(), 0, sh.out);

  cuda::DeviceContext ctx(0);
  auto dW = ctx.upload(W.data(), nw), dVin = ctx.upload(V.data(), nv), dA = ctx.upload(alpha.data(), nk),
       dB = ctx.upload(beta.data(), nk), dLo = ctx.upload(lo.data(), nk), dHi = ctx.upload(hi.data(), nk),
       dD = ctx.upload(dWhat.data(), nw);
  auto gWhat = ctx.alloc<float>(nw), gScale = ctx.alloc<float>(nk), gZero = ctx.alloc<float>(nk);
  auto gda = ctx.alloc<float>(nk), gdb = ctx.alloc<float>(nk);
  auto gWhat16 = ctx.alloc<uint16_t>(nw);
  auto gdV = ctx.upload(std::vector<float>(static_cast<size_t>(nv), 0.f).data(), nv);
  cuda::qdq_fwd(ctx, sh, dW.data(), dVin.data(), dA.data(), dB.data(), dLo.data(), dHi.data(), gWhat.data(), nullptr,
                gScale.data(), gZero.data());
  cuda::qdq_fwd(ctx, sh, dW.data(), dVin.data(), dA.data(), dB.data(), dLo.data(), dHi.data(), nullptr,
                gWhat16.data(), nullptr, nullptr);
  cuda::qdq_bwd(ctx, sh, dW.data(), dVin.data(), dA.data(), dB.data(), dLo.data(), dHi.data(), dD.data(),
                gdV.data(), gda.data(), gdb.data());
  expect_same_bits(What, download(ctx, gWhat), "What");
  expect_same_bits(What16, download(ctx, gWhat16), "What (bf16)");
  expect_same_bits(scale, download(ctx, gScale), "scale");
  expect_same_bits(zero, download(ctx, gZero), "zero");
  expect_same_bits(dV, download(ctx, gdV), "dV");
  expect_same_bits(da, download(ctx, gda), "dalpha");
  expect_same_bits(db, download(ctx, gdb), "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaQdq,
                         ::testing::Values(QdqCase{7, 200, 32, 4, true}, QdqCase{7, 200, 32, 4, false},
                                           QdqCase{5, 128, -1, 2, true}, QdqCase{9, 256, 128, 3, false},
                                           QdqCase{33, 512, 128, 8, true}, QdqCase{16, 4096, 128, 4, false}));

// The device step against quant/sign_step.h's values on the host, with zero, infinite and NaN gradients.
TEST(CudaStep, SignStepEqualsTheCpuStepAndFlagsNonFiniteGradients) {
  AR_REQUIRE_GPU();
  const int64_t n = 100003;
  auto p = uniform(size_t(n), -0.2f, 1.2f, 6), d = uniform(size_t(n), -1.f, 1.f, 7);
  d[10] = 0.f;
  d[11] = -0.f;
  cuda::DeviceContext ctx(0);
  for (const bool coef : {false, true}) {
    for (const bool bad : {false, true}) {
      std::vector<float> dd = d;
      if (bad) {
        dd[12] = INFINITY;
        dd[n - 1] = NAN;
      }
      std::vector<float> want = p;
      for (int64_t i = 0; i < n; ++i)
        want[size_t(i)] = coef ? quant::coef_step_value(p[size_t(i)], dd[size_t(i)], 0.005f)
                               : quant::sign_step_value(p[size_t(i)], dd[size_t(i)], 0.005f);
      auto gp = ctx.upload(p.data(), n), gd = ctx.upload(dd.data(), n), gs = ctx.alloc<float>(n);
      int zero = 0;
      auto flag = ctx.upload(&zero, 1);
      cuda::sign_step(ctx, gp.data(), gd.data(), n, 0.005f, coef, gs.data(), flag.data());
      expect_same_bits(want, download(ctx, gp), coef ? "coefficients" : "V");
      expect_same_bits(p, download(ctx, gs), "saved");
      EXPECT_EQ(download(ctx, flag)[0], bad ? 1 : 0);
    }
  }
  EXPECT_EQ(quant::sign_step_value(0.5f, 0.f, 0.25f), 0.5f);
  EXPECT_EQ(quant::coef_step_value(0.9f, -1.f, 0.25f), 1.f);
}

struct GemmCase {
  int64_t n, in, out;
};
void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.n << "x" << c.in << "->" << c.out; }

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

// The three Linear products, fp32 and bf16 operands, written and accumulated, against the double
// reference on the same (bf16-rounded) operands: norm-wise relative error below fp32 accumulation's.
TEST_P(CudaGemm, LinearProductsMatchTheDoubleReference) {
  AR_REQUIRE_GPU();
  const auto [n, in, out] = GetParam();
  cuda::DeviceContext ctx(0);
  for (const cuda::GemmType type : {cuda::GemmType::F32, cuda::GemmType::BF16}) {
    const bool b16 = type == cuda::GemmType::BF16;
    auto x = uniform(size_t(n * in), -1.f, 1.f, 8), W = uniform(size_t(out * in), -1.f, 1.f, 9),
         dy = uniform(size_t(n * out), -1.f, 1.f, 10), base = uniform(size_t(std::max(n, out) * std::max(in, out)), -1.f, 1.f, 11);
    auto to_device = [&](std::vector<float>& v) {  // rounds to bf16 in place for the bf16 case
      if (!b16) return std::make_pair(ctx.upload(v.data(), int64_t(v.size())), cuda::DeviceArray<uint16_t>{});
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        h[i] = f32_to_bf16(v[i]);
        v[i] = bf16_to_f32(h[i]);
      }
      return std::make_pair(cuda::DeviceArray<float>{}, ctx.upload(h.data(), int64_t(h.size())));
    };
    auto [x32, x16] = to_device(x);
    auto [W32, W16] = to_device(W);
    auto [dy32, dy16] = to_device(dy);
    auto op = [&](auto& a32, auto& a16) -> const void* { return b16 ? static_cast<const void*>(a16.data()) : a32.data(); };
    std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), dyd(dy.begin(), dy.end());
    for (const bool acc : {false, true}) {
      std::vector<double> y(size_t(n * out)), dx(size_t(n * in)), dWr(size_t(out * in));
      for (size_t i = 0; i < y.size(); ++i) y[i] = acc ? base[i] : 0.0;
      for (size_t i = 0; i < dx.size(); ++i) dx[i] = acc ? base[i] : 0.0;
      for (size_t i = 0; i < dWr.size(); ++i) dWr[i] = acc ? base[i] : 0.0;
      std::vector<double> y0 = y;
      ref::linear_fwd<double>(xd.data(), Wd.data(), nullptr, y0.data(), n, in, out);
      for (size_t i = 0; i < y.size(); ++i) y[i] += y0[i];
      ref::linear_bwd<double>(dyd.data(), xd.data(), Wd.data(), dx.data(), true, dWr.data(), nullptr, n, in, out);
      auto gy = ctx.upload(std::vector<float>(base.begin(), base.begin() + int64_t(y.size())).data(), int64_t(y.size()));
      auto gdx = ctx.upload(std::vector<float>(base.begin(), base.begin() + int64_t(dx.size())).data(), int64_t(dx.size()));
      auto gdW = ctx.upload(std::vector<float>(base.begin(), base.begin() + int64_t(dWr.size())).data(), int64_t(dWr.size()));
      cuda::linear_fwd(ctx, type, op(x32, x16), op(W32, W16), gy.data(), n, in, out, acc);
      cuda::linear_dx(ctx, type, op(dy32, dy16), op(W32, W16), gdx.data(), n, in, out, acc);
      cuda::linear_dw(ctx, type, op(dy32, dy16), op(x32, x16), gdW.data(), n, in, out, acc);
      const std::string tag = std::string(b16 ? "bf16" : "fp32") + (acc ? " accumulated" : "");
      const auto err = [&](const cuda::DeviceArray<float>& g, const std::vector<double>& want) {
        const std::vector<float> got = download(ctx, g);
        return test::rel_err(got.data(), want.data(), want.size());
      };
      EXPECT_LT(err(gy, y), 1e-5) << "y, " << tag;
      EXPECT_LT(err(gdx, dx), 1e-5) << "dx, " << tag;
      EXPECT_LT(err(gdW, dWr), 1e-5) << "dW, " << tag;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemm,
                         ::testing::Values(GemmCase{37, 96, 80}, GemmCase{256, 576, 1536}, GemmCase{1, 4096, 8}));

// The context's plan cache (gemm_plan.h): a product of a shape it has seen reuses that plan and gives the
// same bits; an operand at a less aligned address gets a plan of its own, and the same result within
// fp32's summation error.
TEST(CudaGemmPlans, EachShapeAndAlignmentIsPlannedOnceAndReusedWithTheSameBits) {
  AR_REQUIRE_GPU();
  cuda::DeviceContext ctx(0);
  const int64_t n = 64, in = 256, out = 96;
  auto x = uniform(size_t(n * in + 1), -1.f, 1.f, 21), W = uniform(size_t(out * in), -1.f, 1.f, 22);
  auto gx = ctx.upload(x.data(), int64_t(x.size())), gW = ctx.upload(W.data(), int64_t(W.size()));
  auto y1 = ctx.alloc<float>(n * out), y2 = ctx.alloc<float>(n * out), y3 = ctx.alloc<float>(n * out);
  const cuda::GemmPlans& plans = ctx.gemm_plans();
  cuda::linear_fwd(ctx, cuda::GemmType::F32, gx.data(), gW.data(), y1.data(), n, in, out);
  EXPECT_EQ(plans.misses(), 1);
  cuda::linear_fwd(ctx, cuda::GemmType::F32, gx.data(), gW.data(), y2.data(), n, in, out);
  EXPECT_EQ(plans.misses(), 1);
  EXPECT_EQ(plans.hits(), 1);
  expect_same_bits(download(ctx, y1), download(ctx, y2), "the planned product, twice");
  cuda::linear_fwd(ctx, cuda::GemmType::F32, gx.data() + 1, gW.data(), y3.data(), n, in, out);  // 4-byte aligned x
  EXPECT_EQ(plans.misses(), 2);
  EXPECT_EQ(plans.size(), 2u);
  std::vector<double> xd(x.begin() + 1, x.end()), Wd(W.begin(), W.end()), want(size_t(n * out));
  ref::linear_fwd<double>(xd.data(), Wd.data(), nullptr, want.data(), n, in, out);
  const std::vector<float> got = download(ctx, y3);
  EXPECT_LT(test::rel_err(got.data(), want.data(), want.size()), 1e-5);
}

class CudaBlock : public ::testing::TestWithParam<test::Variant> {};

// BlockRunner<CudaOps>: the whole dense block, forward and every gradient, on the device against the
// double reference block on the same fp32-rounded inputs (as test_block.cpp checks the CPU's), in fp32
// and under --amp.
TEST_P(CudaBlock, ForwardAndBackwardMatchTheDoubleReference) {
  AR_REQUIRE_GPU();
  test::BlockCase s(GetParam());
  std::map<std::string, std::vector<float>> wf;
  for (auto& [k, w] : s.w.t) {
    wf[k] = test::cast<float>(w);
    w = test::cast<double>(wf[k]);
  }
  auto xf = test::cast<float>(s.x), Rf = test::cast<float>(s.R), csf = test::cast<float>(s.cs),
       snf = test::cast<float>(s.sn);
  s.x = test::cast<double>(xf);
  s.R = test::cast<double>(Rf);
  s.cs = test::cast<double>(csf);
  s.sn = test::cast<double>(snf);
  ref::RefOps<double> rops;
  BlockRunner<ref::RefOps<double>> rrun(rops, s.d);
  BlockAux<double> raux{s.B, s.T, s.pos.data(), s.cs.data(), s.sn.data(), s.key_mask()};
  std::vector<double> y(s.x.size()), dx(s.x.size());
  std::map<std::string, std::vector<double>> g;
  for (auto& [k, w] : s.w.t) g[k].assign(w.size(), 0.0);
  BlockRunner<ref::RefOps<double>>::Cache rc;
  rrun.forward(test::Weights::ptrs<const double*>(s.w.t), raux, s.x.data(), y.data(), rc);
  rrun.backward(test::Weights::ptrs<const double*>(s.w.t), raux, rc, s.R.data(), dx.data(),
                test::Weights::ptrs<double*>(g), true);

  cuda::DeviceContext ctx(0);
  std::map<std::string, cuda::DeviceArray<float>> dw, dg;
  for (auto& [k, w] : wf) {
    dw[k] = ctx.upload(w.data(), int64_t(w.size()));
    dg[k] = ctx.upload(std::vector<float>(w.size(), 0.f).data(), int64_t(w.size()));
  }
  auto device_ptrs = [](auto& m, auto tag) {
    using P = decltype(tag);
    BlockPtrs<P> p;
    auto get = [&](const char* k) -> P {
      auto it = m.find(k);
      return it == m.end() ? nullptr : it->second.data();
    };
    p.ln1 = get("ln1"); p.wq = get("wq"); p.wk = get("wk"); p.wv = get("wv"); p.bq = get("bq"); p.bk = get("bk");
    p.bv = get("bv"); p.q_norm = get("q_norm"); p.k_norm = get("k_norm"); p.wo = get("wo"); p.bo = get("bo");
    p.ln2 = get("ln2"); p.wg = get("wg"); p.wu = get("wu"); p.wd = get("wd");
    return p;
  };
  auto gx = ctx.upload(xf.data(), int64_t(xf.size())), gR = ctx.upload(Rf.data(), int64_t(Rf.size()));
  auto gcs = ctx.upload(csf.data(), int64_t(csf.size())), gsn = ctx.upload(snf.data(), int64_t(snf.size()));
  auto gpos = ctx.upload(s.pos.data(), int64_t(s.pos.size()));
  auto gmask = ctx.upload(s.mask.data(), int64_t(s.mask.size()));
  auto gy = ctx.alloc<float>(int64_t(xf.size())), gdx = ctx.alloc<float>(int64_t(xf.size()));
  BlockAux<float> aux{s.B, s.T, gpos.data(), gcs.data(), gsn.data(), s.masked ? gmask.data() : nullptr};
  // fp32, then --amp: every Linear's weight bound to its bf16 copy, bf16 operands everywhere (the
  // tolerance is bf16's: 8 significant bits per operand).
  for (const bool amp : {false, true}) {
    cuda::CudaOps ops(ctx, amp);
    std::map<std::string, cuda::DeviceArray<uint16_t>> w16;
    for (const char* k : {"wq", "wk", "wv", "wo", "wg", "wu", "wd"}) {
      w16[k] = ctx.alloc<uint16_t>(dw[k].n);
      cuda::to_bf16(ctx, dw[k].data(), w16[k].data(), dw[k].n);
      ops.bind(dw[k].data(), w16[k].data());
    }
    for (auto& [k, a] : dg) cudaMemsetAsync(a.data(), 0, a.bytes(), ctx.stream());
    BlockRunner<cuda::CudaOps> run(ops, s.d);
    BlockRunner<cuda::CudaOps>::Cache cc;
    run.forward(device_ptrs(dw, static_cast<const float*>(nullptr)), aux, gx.data(), gy.data(), cc);
    run.backward(device_ptrs(dw, static_cast<const float*>(nullptr)), aux, cc, gR.data(), gdx.data(),
                 device_ptrs(dg, static_cast<float*>(nullptr)), true);
    const double tol = amp ? 3e-2 : 1e-5;
    const auto yf = download(ctx, gy), dxf = download(ctx, gdx);
    EXPECT_LT(test::rel_err(yf.data(), y.data(), y.size()), tol) << "y, amp " << amp;
    EXPECT_LT(test::rel_err(dxf.data(), dx.data(), dx.size()), tol) << "dx, amp " << amp;
    for (auto& [k, w] : g) {
      const auto got = download(ctx, dg[k]);
      EXPECT_LT(test::rel_err(got.data(), w.data(), w.size()), tol) << "d" << k << ", amp " << amp;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaBlock,
                         ::testing::Values(test::Variant{"llama", false, false, false},
                                           test::Variant{"bias", true, false, false},
                                           test::Variant{"qwen3", false, true, false},
                                           test::Variant{"masked", true, true, true},
                                           test::Variant{"gemma3", false, true, false, true},
                                           test::Variant{"gated", true, true, true, false, false, true}),
                         [](const auto& p) { return std::string(p.param.name); });

struct AttnCase {
  const char* name;
  ref::AttnShape s;
  bool masked;
};
void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }
class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

// The tiled kernels (attention_tiled.cu) against the double reference and the unit kernels, forward and
// backward: GQA, lengths that are not a multiple of the tile, more keys than queries, masked keys and a
// sequence whose keys are all masked (lse -inf, o and every gradient 0). Two runs give the same bits.
TEST_P(CudaAttention, TiledMatchesTheDoubleReferenceAndTheUnits) {
  AR_REQUIRE_GPU();
  const ref::AttnShape s = GetParam().s;
  const int64_t nq = s.B * s.Tq * s.H * s.D, nk = s.B * s.Tk * s.Hkv * s.D, nl = s.B * s.H * s.Tq;
  const auto q = uniform(size_t(nq), -2.f, 2.f, 1), k = uniform(size_t(nk), -2.f, 2.f, 2),
             v = uniform(size_t(nk), -1.f, 1.f, 3), dout = uniform(size_t(nq), -1.f, 1.f, 4);
  std::vector<uint8_t> mask(size_t(s.B * s.Tk), 1);
  if (GetParam().masked) {
    std::mt19937 rng(5);
    for (auto& m : mask) m = rng() % 4 != 0;
    for (int64_t j = 0; j < s.Tk; ++j) mask[size_t(j)] = 0;  // batch row 0: every key masked
  }
  const uint8_t* hm = GetParam().masked ? mask.data() : nullptr;
  auto qd = test::cast<double>(q), kd = test::cast<double>(k), vd = test::cast<double>(v),
       dod = test::cast<double>(dout);
  std::vector<double> o(static_cast<size_t>(nq)), lse(static_cast<size_t>(nl)), dq(static_cast<size_t>(nq)),
      dk(static_cast<size_t>(nk)), dv(static_cast<size_t>(nk));
  ref::attention_fwd(s, qd.data(), kd.data(), vd.data(), hm, o.data(), lse.data());
  ref::attention_bwd(s, qd.data(), kd.data(), vd.data(), hm, o.data(), lse.data(), dod.data(), dq.data(), dk.data(),
                     dv.data());

  cuda::DeviceContext ctx(0);
  auto gq = ctx.upload(q.data(), nq), gk = ctx.upload(k.data(), nk), gv = ctx.upload(v.data(), nk),
       gdo = ctx.upload(dout.data(), nq);
  auto gm = ctx.upload(mask.data(), int64_t(mask.size()));
  const uint8_t* dm = GetParam().masked ? gm.data() : nullptr;
  ASSERT_TRUE(cuda::attention_tiled_fits(s, {gq.data(), gk.data(), gv.data(), gdo.data()}));
  struct Out {
    std::vector<float> o, lse, dq, dk, dv;
  };
  auto run = [&](cuda::AttnKernels kern) {
    auto go = ctx.alloc<float>(nq), gl = ctx.alloc<float>(nl), gd = ctx.alloc<float>(nl), gdq = ctx.alloc<float>(nq),
         gdk = ctx.alloc<float>(nk), gdv = ctx.alloc<float>(nk);
    for (auto* a : {&go, &gdq, &gdk, &gdv}) cudaMemsetAsync(a->data(), 0x7f, a->bytes(), ctx.stream());  // poison
    cudaMemsetAsync(gl.data(), 0x7f, gl.bytes(), ctx.stream());
    cuda::attention_fwd(ctx, s, gq.data(), gk.data(), gv.data(), dm, go.data(), gl.data(), kern);
    cuda::attention_bwd(ctx, s, gq.data(), gk.data(), gv.data(), dm, go.data(), gl.data(), gdo.data(), gd.data(),
                        gdq.data(), gdk.data(), gdv.data(), kern);
    return Out{download(ctx, go), download(ctx, gl), download(ctx, gdq), download(ctx, gdk), download(ctx, gdv)};
  };
  const Out t = run(cuda::AttnKernels::Fastest), u = run(cuda::AttnKernels::Units);
  EXPECT_LT(test::rel_err(t.o.data(), o.data(), o.size()), 1e-5) << "o";
  EXPECT_LT(test::rel_err(t.dq.data(), dq.data(), dq.size()), 1e-5) << "dq";
  EXPECT_LT(test::rel_err(t.dk.data(), dk.data(), dk.size()), 1e-5) << "dk";
  EXPECT_LT(test::rel_err(t.dv.data(), dv.data(), dv.size()), 1e-5) << "dv";
  EXPECT_LT(test::rel_err(t.o.data(), u.o.data(), o.size()), 1e-5) << "o against the units";
  EXPECT_LT(test::rel_err(t.dk.data(), u.dk.data(), dk.size()), 1e-5) << "dk against the units";
  size_t bad_lse = 0;
  for (size_t r = 0; r < lse.size(); ++r) {
    const bool dead = std::isinf(lse[r]);
    if (dead != std::isinf(t.lse[r]) || (!dead && std::abs(t.lse[r] - lse[r]) > 1e-5 * (1 + std::abs(lse[r]))))
      ++bad_lse;
  }
  EXPECT_EQ(bad_lse, 0u) << "lse rows off the reference";
  const Out t2 = run(cuda::AttnKernels::Fastest);
  expect_same_bits(t.o, t2.o, "o, second run");
  expect_same_bits(t.dq, t2.dq, "dq, second run");
  expect_same_bits(t.dk, t2.dk, "dk, second run");
  expect_same_bits(t.dv, t2.dv, "dv, second run");
}

// A sliding window (gpt-oss, Gemma 3): the tiled kernels decline it and the per-unit kernels run it, against
// the double reference, with padded keys and more keys than queries.
TEST(CudaAttentionWindow, UnitsRunItAsTheDoubleReference) {
  AR_REQUIRE_GPU();
  for (const ref::AttnShape base : {ref::AttnShape{2, 77, 77, 4, 2, 64}, ref::AttnShape{2, 40, 70, 2, 1, 32}}) {
    ref::AttnShape s = base;
    s.window = 20;
    const int64_t nq = s.B * s.Tq * s.H * s.D, nk = s.B * s.Tk * s.Hkv * s.D, nl = s.B * s.H * s.Tq;
    const auto q = uniform(size_t(nq), -2.f, 2.f, 11), k = uniform(size_t(nk), -2.f, 2.f, 12),
               v = uniform(size_t(nk), -1.f, 1.f, 13), dout = uniform(size_t(nq), -1.f, 1.f, 14);
    std::vector<uint8_t> mask(size_t(s.B * s.Tk), 1);
    std::mt19937 rng(15);
    for (auto& m : mask) m = rng() % 4 != 0;
    auto qd = test::cast<double>(q), kd = test::cast<double>(k), vd = test::cast<double>(v),
         dod = test::cast<double>(dout);
    std::vector<double> o(static_cast<size_t>(nq)), lse(static_cast<size_t>(nl)), dq(static_cast<size_t>(nq)),
        dk(static_cast<size_t>(nk)), dv(static_cast<size_t>(nk));
    ref::attention_fwd(s, qd.data(), kd.data(), vd.data(), mask.data(), o.data(), lse.data());
    ref::attention_bwd(s, qd.data(), kd.data(), vd.data(), mask.data(), o.data(), lse.data(), dod.data(), dq.data(),
                       dk.data(), dv.data());
    cuda::DeviceContext ctx(0);
    auto gq = ctx.upload(q.data(), nq), gk = ctx.upload(k.data(), nk), gv = ctx.upload(v.data(), nk),
         gdo = ctx.upload(dout.data(), nq);
    auto gm = ctx.upload(mask.data(), int64_t(mask.size()));
    EXPECT_FALSE(cuda::attention_tiled_fits(s, {gq.data(), gk.data(), gv.data(), gdo.data()}));
    auto go = ctx.alloc<float>(nq), gl = ctx.alloc<float>(nl), gd = ctx.alloc<float>(nl), gdq = ctx.alloc<float>(nq),
         gdk = ctx.alloc<float>(nk), gdv = ctx.alloc<float>(nk);
    cuda::attention_fwd(ctx, s, gq.data(), gk.data(), gv.data(), gm.data(), go.data(), gl.data(),
                        cuda::AttnKernels::Fastest);
    cuda::attention_bwd(ctx, s, gq.data(), gk.data(), gv.data(), gm.data(), go.data(), gl.data(), gdo.data(), gd.data(),
                        gdq.data(), gdk.data(), gdv.data(), cuda::AttnKernels::Fastest);
    const auto ho = download(ctx, go), hdq = download(ctx, gdq), hdk = download(ctx, gdk), hdv = download(ctx, gdv);
    EXPECT_LT(test::rel_err(ho.data(), o.data(), o.size()), 1e-5) << "o";
    EXPECT_LT(test::rel_err(hdq.data(), dq.data(), dq.size()), 1e-5) << "dq";
    EXPECT_LT(test::rel_err(hdk.data(), dk.data(), dk.size()), 1e-5) << "dk";
    EXPECT_LT(test::rel_err(hdv.data(), dv.data(), dv.size()), 1e-5) << "dv";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Values(AttnCase{"gqa_d64_t77", {2, 77, 77, 4, 2, 64}, false},
                      AttnCase{"gqa_d128_t130_masked", {2, 130, 130, 8, 2, 128}, true},
                      AttnCase{"d32_more_keys_masked", {2, 40, 70, 2, 1, 32}, true},
                      AttnCase{"d48_t33", {1, 33, 33, 3, 3, 48}, false},
                      AttnCase{"d16_t5", {3, 5, 5, 2, 1, 16}, true}),
    [](const auto& p) { return std::string(p.param.name); });
