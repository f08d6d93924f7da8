// The float schemes' QDQ on the device (kernels/cuda/qdq_fp.h) against the CPU's (quant/qdq_fp.h) bit for
// bit: both run quant/qdq_fp_elem.h. Skips with one line without a GPU.
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/qdq_fp.h"
#include "quant/qdq_fp.h"
#include "cuda_test_util.h"
#include "test_util.h"

using namespace ar;

namespace {

using test::download;
using test::expect_same_bits;
using test::uniform;

struct FpCase {
  const char* name;
  quant::FpFamily family;
  quant::FpElem elem;
  int64_t out, in, group, block_rows;
  bool init;
};
void PrintTo(const FpCase& c, std::ostream* os) { *os << c.name; }

}  // namespace

class CudaFloatQdq : public ::testing::TestWithParam<FpCase> {};

// Forward (fp32 and bf16 outputs, the reported scales) and backward (dV, dbeta) against the CPU, with a
// padded last tile, an all-zero tile, coefficients below 1 and offsets that clip.
TEST_P(CudaFloatQdq, ForwardAndBackwardEqualTheCpuBitForBit) {
  std::string why;
  if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  const FpCase c = GetParam();
  quant::FpQdqShape sh = quant::make_fp_qdq_shape(c.family, c.elem, c.out, c.in, c.group, c.block_rows);
  const int64_t nw = sh.out * sh.in, nv = sh.out * sh.padded_in(), nt = sh.tiles();
  auto W = uniform(size_t(nw), -1.f, 1.f, 1);
  for (int64_t k = 0; k < sh.tile_cols && k < sh.in; ++k) W[size_t(k)] = 0.f;  // tile 0's first row: zeros
  if (sh.family == quant::FpFamily::Nvfp4) sh.global_scale = quant::nvfp4_global_scale(W.data(), nw);
  const auto V = uniform(size_t(nv), -0.6f, 0.6f, 2), beta = uniform(size_t(nt), 0.5f, 1.f, 3),
             init = uniform(size_t(nt), 0.8f, 1.2f, 4), dWhat = uniform(size_t(nw), -1.f, 1.f, 5);
  std::vector<float> amax(static_cast<size_t>(nt));
  quant::fp_qdq_amax(sh, W.data(), amax.data());
  const float* in = c.init ? init.data() : nullptr;

  Context host(Device{}, 1);
  std::vector<float> What(static_cast<size_t>(nw)), scale(static_cast<size_t>(nt)), dV(static_cast<size_t>(nv), 0.f),
      dbeta(static_cast<size_t>(nt));
  std::vector<uint16_t> What16(static_cast<size_t>(nw));
  quant::fp_qdq_fwd(sh, W.data(), V.data(), beta.data(), in, amax.data(), What.data(), scale.data());
  quant::fp_qdq_fwd(host, sh, W.data(), V.data(), beta.data(), in, amax.data(), nullptr, What16.data(), nullptr);
  quant::fp_qdq_bwd(sh, W.data(), V.data(), beta.data(), in, amax.data(), dWhat.data(), dV.data(), dbeta.data());

  cuda::DeviceContext ctx(0);
  auto gW = ctx.upload(W.data(), nw), gV = ctx.upload(V.data(), nv), gB = ctx.upload(beta.data(), nt),
       gI = ctx.upload(init.data(), nt), gA = ctx.upload(amax.data(), nt), gD = ctx.upload(dWhat.data(), nw);
  auto gWhat = ctx.alloc<float>(nw), gScale = ctx.alloc<float>(nt), gdb = ctx.alloc<float>(nt);
  auto gWhat16 = ctx.alloc<uint16_t>(nw);
  auto gdV = ctx.upload(std::vector<float>(static_cast<size_t>(nv), 0.f).data(), nv);
  const float* gin = c.init ? gI.data() : nullptr;
  cuda::fp_qdq_fwd(ctx, sh, gW.data(), gV.data(), gB.data(), gin, gA.data(), gWhat.data(), nullptr, gScale.data());
  cuda::fp_qdq_fwd(ctx, sh, gW.data(), gV.data(), gB.data(), gin, gA.data(), nullptr, gWhat16.data(), nullptr);
  cuda::fp_qdq_bwd(ctx, sh, gW.data(), gV.data(), gB.data(), gin, gA.data(), gD.data(), gdV.data(), gdb.data());
  expect_same_bits(What, download(ctx, gWhat), "What");
  expect_same_bits(What16, download(ctx, gWhat16), "What (bf16)");
  expect_same_bits(scale, download(ctx, gScale), "scale");
  expect_same_bits(dV, download(ctx, gdV), "dV");
  expect_same_bits(dbeta, download(ctx, gdb), "dbeta");
}

using quant::FpElem;
using quant::FpFamily;
INSTANTIATE_TEST_SUITE_P(
    Schemes, CudaFloatQdq,
    ::testing::Values(FpCase{"mxfp4", FpFamily::Mx, FpElem::E2M1, 37, 100, 32, 0, false},
                      FpCase{"mxfp8", FpFamily::Mx, FpElem::E4M3, 16, 256, 32, 0, true},
                      FpCase{"mxfp4_rceil", FpFamily::MxRceil, FpElem::E2M1, 9, 96, 32, 0, false},
                      FpCase{"nvfp4", FpFamily::Nvfp4, FpElem::E2M1, 33, 200, 16, 0, true},
                      FpCase{"fp8_per_channel", FpFamily::Fp8, FpElem::E4M3, 24, 512, -1, 0, false},
                      FpCase{"fp8_block", FpFamily::Fp8, FpElem::E4M3, 200, 300, 128, 128, true}),
    [](const ::testing::TestParamInfo<FpCase>& i) { return std::string(i.param.name); });
