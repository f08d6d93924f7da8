// SignRound on the CUDA backend (quant/cuda/signround_cuda.h) against the CPU tuner on the same block,
// samples and options, and the block passes on the GPU (quant/cuda/block_pass_cuda.h) against the CPU's. The bits differ (another GEMM summation order), so the checks are on quality:
// the same starting loss, and a tuned block as far below RTN as the CPU's (under --amp: bf16 GEMMs on
// the GPU against the CPU's fp32, within 15%). Skips without a GPU.
#include <optional>
#include <ostream>
#include <string>

#include "block_fixture.h"
#include "kernels/cuda/device.h"
#include "quant/cuda/block_pass_cuda.h"
#include "quant/cuda/signround_cuda.h"
#include "test_util.h"

using namespace ar;

namespace {

bool skip_without_gpu(std::string* why) { return cuda::device_count(why) == 0; }

}  // namespace

TEST(SignRoundCuda, RefusesWhatItDoesNotTuneYetNamingIt) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  test::Fixture f;
  cuda::DeviceContext dev(0);
  BlockWeights w = f.copy();
  quant::SignRoundOptions o;
  o.iters = 2;
  quant::QuantFormat per_tensor(8, 0, true), fp8_static(8, -1, true);
  per_tensor.fp = fp8_static.fp = quant::FpFamily::Fp8;
  fp8_static.act_bits = 8;
  for (const auto& [fmt, what] : {std::pair{per_tensor, "a float weight scheme with one scale per tensor"},
                                  std::pair{fp8_static, "FP8_STATIC"}}) {
    try {
      quant::signround_tune_block_cuda(dev, f.ctx, f.dims, w, fmt, f.aux(f.n), f.x, f.y, f.mask, o);
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(what) + " is not tuned on the CUDA backend yet"),
                std::string::npos)
          << e.what();
    }
  }
}

struct Case {
  int bits;
  bool sym;
  int gas;
  bool amp = false;
  std::optional<quant::FpFamily> fp = std::nullopt;  // a float scheme: MXFP4 (group 32) or NVFP4 (group 16)
  quant::QuantFormat format() const {
    quant::QuantFormat f(bits, fp ? (*fp == quant::FpFamily::Nvfp4 ? 16 : 32) : 32, sym);
    f.fp = fp;
    return f;
  }
  std::string name() const {
    std::string n;
    if (fp) {
      n = *fp == quant::FpFamily::Nvfp4 ? "NVFP4" : "MXFP4";
    } else {
      n = "W";
      n += std::to_string(bits);
      n += sym ? "sym" : "asym";
      n += "gas";
      n += std::to_string(gas);
    }
    if (amp) n += "amp";
    return n;
  }
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

class SignRoundCuda : public ::testing::TestWithParam<Case> {};

TEST_P(SignRoundCuda, TunesTheBlockAsTheCpuDoes) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Case c = GetParam();
  test::Fixture f;
  const quant::QuantFormat fmt = c.format();
  BlockWeights rtn = f.copy(), on_cpu = f.copy(), on_gpu = f.copy();
  f.tune(rtn, fmt, 0);
  quant::SignRoundOptions o;
  o.iters = 80;
  o.batch_size = 4;
  o.gradient_accumulate_steps = c.gas;
  o.deterministic = false;
  const auto rc = f.tune(on_cpu, fmt, o.iters, 42, o);  // fp32 on the CPU: the reference either way
  cuda::DeviceContext dev(0);
  o.amp = c.amp;
  const auto rg = quant::signround_tune_block_cuda(dev, f.ctx, f.dims, on_gpu, fmt, f.aux(f.n), f.x, f.y, f.mask, o);
  EXPECT_NEAR(rg.loss_first, rc.loss_first, (c.amp ? 2e-2 : 1e-4) * rc.loss_first) << "the same start";
  const double e_rtn = f.mse(rtn), e_cpu = f.mse(on_cpu), e_gpu = f.mse(on_gpu);
  std::printf("%s: block MSE RTN %.6g, CPU %.6g, GPU %.6g (best at %d / %d)\n", c.name().c_str(), e_rtn, e_cpu,
              e_gpu, rc.best_iter, rg.best_iter);
  EXPECT_LT(e_gpu, 0.9 * e_rtn);
  EXPECT_LT(e_gpu, (c.amp ? 1.15 : 1.1) * e_cpu);
  ASSERT_EQ(rg.layers.size(), rc.layers.size());
  for (size_t l = 0; l < rg.layers.size(); ++l) {
    EXPECT_EQ(rg.layers[l].name, rc.layers[l].name);
    EXPECT_EQ(rg.layers[l].scale.numel(), rc.layers[l].scale.numel());
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SignRoundCuda,
                         ::testing::Values(Case{4, true, 1}, Case{2, false, 1}, Case{4, false, 2},
                                           Case{4, true, 1, true}, Case{4, true, 1, false, quant::FpFamily::Mx},
                                           Case{4, true, 1, true, quant::FpFamily::Nvfp4}),
                         [](const auto& p) { return p.param.name(); });

// The FP pass of `quantize --device cuda:0` against the CPU's fp32 forward of the same block (the
// fixture's targets): fp32, amp (bf16 GEMM operands) and bf16 activations in and out, in micro-batches
// that do not divide the samples. A key mask is refused, naming it.
TEST(BlockPassCuda, ForwardMatchesTheCpuPass) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  test::Fixture f;
  cuda::DeviceContext dev(0);
  const int64_t per = f.T * f.dims.C;
  auto err = [&](const Tensor& got, const Tensor& want) {
    const Tensor g = got.dtype() == DType::F32 ? got : got.to(DType::F32, f.ctx);
    return test::rel_err(g.f32(), want.f32(), size_t(f.n * per));
  };
  for (const bool amp : {false, true}) {
    Tensor y = Tensor::empty({f.n, f.T, f.dims.C}, DType::F32, f.ctx);
    quant::block_forward_cuda(dev, f.ctx, f.dims, f.w, f.aux(1), f.x, y, f.n, 5, amp);
    EXPECT_LT(err(y, f.y), amp ? 3e-2 : 1e-5) << "amp " << amp;
  }
  const Tensor xb = f.x.to(DType::BF16, f.ctx);
  Tensor want = Tensor::empty({f.n, f.T, f.dims.C}, DType::F32, f.ctx);
  f.forward(f.w, xb.to(DType::F32, f.ctx), want);
  Tensor yb = Tensor::empty({f.n, f.T, f.dims.C}, DType::BF16, f.ctx);
  quant::block_forward_cuda(dev, f.ctx, f.dims, f.w, f.aux(1), xb, yb, f.n, 3, false);
  EXPECT_LT(err(yb, want), 4e-3) << "bf16 activations (one rounding of the output)";
  std::vector<uint8_t> keys(size_t(f.T), 1);
  BlockAux<float> masked = f.aux(1);
  masked.key_mask = keys.data();
  try {
    quant::block_forward_cuda(dev, f.ctx, f.dims, f.w, masked, f.x, yb, f.n, 3, false);
    ADD_FAILURE() << "a key mask was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a key mask does not run on the CUDA backend yet"), std::string::npos)
        << e.what();
  }
}
