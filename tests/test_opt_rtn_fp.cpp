// AutoRound's optimized RTN for MX and NVFP4 (quant/opt_rtn_fp.h) against the wheel's own search and
// QDQ (tests/data/fp_goldens/opt_rtn_fp.safetensors, made by tools/make_fp_opt_rtn_goldens.py): the
// coefficient chosen per block and the resulting weights, on a weight with a wide row and an all-zero
// block, and an imatrix with zero entries (both of AutoRound's repairs); the search never scores worse
// than plain RTN; the pool's split does not change the result.
#include <gtest/gtest.h>

#include <cstring>

#include "io/safetensors.h"
#include "quant/opt_rtn_fp.h"
#include "golden_file.h"
#include "test_util.h"

using namespace ar;
using namespace ar::quant;

namespace {

using test::read_f32;

struct Case {
  const char* name;
  FpFamily family;
  FpElem elem;
  int64_t block;
};
const Case kCases[] = {{"mxfp4", FpFamily::Mx, FpElem::E2M1, 32},
                       {"mxfp8", FpFamily::Mx, FpElem::E4M3, 32},
                       {"nvfp4", FpFamily::Nvfp4, FpElem::E2M1, 16}};

double weighted_error(const std::vector<float>& a, const std::vector<float>& w, const std::vector<float>& imat) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(w[i]);
    e += double(imat[i % imat.size()]) * d * d;
  }
  return e;
}

}  // namespace

TEST(OptRtnFp, MatchesAutoRoundsSearchAndWeights) {
  auto f = SafetensorsFile::open(std::string(AR_SOURCE_DIR) + "/tests/data/fp_goldens/opt_rtn_fp.safetensors");
  for (int threads : {1, 2}) {
    Context ctx(Device{}, threads);
    for (const Case& c : kCases) {
      const std::string n = c.name;
      FpQdqShape sh = make_fp_qdq_shape(c.family, c.elem, 64, 128, c.block);
      const std::vector<float> W = read_f32(*f, n + "/W", 64 * 128), imat = read_f32(*f, n + "/imatrix", 128),
                               want = read_f32(*f, n + "/What", 64 * 128),
                               want_init = read_f32(*f, n + "/init", size_t(sh.tiles()));
      if (c.family == FpFamily::Nvfp4) sh.global_scale = read_f32(*f, n + "/G", 1)[0];
      std::vector<float> init(size_t(sh.tiles())), amax(init.size()), got(W.size()), rtn(W.size());
      fp_opt_rtn_init(ctx, sh, W.data(), imat.data(), init.data());
      int64_t moved = 0;
      for (size_t t = 0; t < init.size(); ++t) {
        ASSERT_EQ(init[t], want_init[t]) << n << " block " << t << " (threads " << threads << ")";
        moved += init[t] != 1.0f;
      }
      EXPECT_GT(moved, 0) << n << ": the search never moved a block off 1";
      fp_qdq_amax(sh, W.data(), amax.data());
      fp_qdq_fwd(sh, W.data(), nullptr, nullptr, init.data(), amax.data(), got.data(), nullptr);
      for (size_t i = 0; i < W.size(); ++i) ASSERT_EQ(got[i], want[i]) << n << " at " << i;
      fp_qdq_fwd(sh, W.data(), nullptr, nullptr, nullptr, amax.data(), rtn.data(), nullptr);
      EXPECT_LE(weighted_error(got, W, imat), weighted_error(rtn, W, imat)) << n;
    }
  }
}

TEST(OptRtnFp, OnlyMxFloorAndNvfp4HaveASearch) {
  EXPECT_TRUE(fp_has_opt_rtn(FpFamily::Mx));
  EXPECT_TRUE(fp_has_opt_rtn(FpFamily::Nvfp4));
  EXPECT_FALSE(fp_has_opt_rtn(FpFamily::MxRceil));
  EXPECT_FALSE(fp_has_opt_rtn(FpFamily::Fp8));
}
