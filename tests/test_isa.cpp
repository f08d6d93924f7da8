// The ISA levels (kernels/cpu/isa.h): the cap AR_CPU_ISA honoured by our dispatch and by oneDNN, and
// every path of the kernels that promise identical bits across levels (exp, fp32 <-> bf16) equal to the
// scalar path on inputs from every class (normal, subnormal, zero, inf, NaN, the clamp edges), with
// lengths that leave every tail. The QDQ backward's paths: tests/test_qdq.cpp. Levels above the
// process's (the machine, or the cap) are not run: the suite under a cap covers the lower ones.
#include <cblas.h>
#include <gtest/gtest.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"
#include "test_util.h"

using namespace ar;
using cpu::Isa;

namespace {
// The levels this process may run, lowest first.
std::vector<Isa> runnable_levels() {
  std::vector<Isa> v;
  for (Isa l : cpu::kIsaLevels)
    if (l <= cpu::kernel_isa()) v.push_back(l);
  return v;
}

using test::from_bits;
constexpr auto bits_of = test::bits;

// Bit patterns over the whole float space (a stride prime to 2^32) plus the values that matter.
std::vector<float> every_class() {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65521) x.push_back(from_bits(uint32_t(u)));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, inf, -inf, std::nanf(""), -std::nanf(""), 1e-45f, -1e-45f, 1.1754942e-38f, 89.f,
                  88.72283f, 88.72284f, -87.33654f, -103.97208f, -104.f, -104.1f, 3.4028235e38f, -3.4028235e38f})
    x.push_back(v);
  for (float v = -110.f; v <= 95.f; v += 0.0173f) x.push_back(v);
  return x;
}
}  // namespace

TEST(Isa, NamesRoundTripAndLevelsAreOrdered) {
  for (Isa l : cpu::kIsaLevels) EXPECT_EQ(cpu::parse_isa(cpu::isa_name(l)), l);
  EXPECT_FALSE(cpu::parse_isa("avx1024").has_value());
  EXPECT_FALSE(cpu::parse_isa("").has_value());
  EXPECT_LT(Isa::scalar, Isa::avx2);
  EXPECT_LT(Isa::avx512, Isa::avx512_bf16);
  EXPECT_LT(Isa::avx512_bf16, Isa::amx);
#ifdef __AVX2__  // an x86-64-v3 build runs only on such machines: the suite itself needs them
  EXPECT_TRUE(cpu::has_x86_64_v3());
#endif
}

TEST(Isa, FeaturesImplyTheLevelsBelow) {
  const cpu::CpuIsa f = cpu::cpu_features();
  EXPECT_TRUE(!f.avx512 || f.avx2);
  EXPECT_TRUE(!f.avx512_bf16 || f.avx512);
  EXPECT_LE(cpu::cpu_isa().level(), f.level());
  EXPECT_EQ(cpu::kernel_isa(), cpu::cpu_isa().level());
}

// Run under AR_CPU_ISA (the capped suite, README "Tests"): nothing above the cap is reported, chosen or
// run by oneDNN; without a cap, the process runs the CPU's own level.
TEST(Isa, CapLimitsEveryPath) {
  const std::optional<Isa> cap = cpu::isa_cap();
  const Isa hw = cpu::cpu_features().level();
  const Isa want = cap ? std::min(*cap, hw) : hw;
  EXPECT_EQ(cpu::kernel_isa(), want);
  const cpu::CpuIsa isa = cpu::cpu_isa();
  EXPECT_EQ(isa.avx512, want >= Isa::avx512);
  EXPECT_EQ(isa.avx512_bf16, want >= Isa::avx512_bf16);
  EXPECT_EQ(cpu::bf16_gemm_supported(), want >= Isa::avx512_bf16);
  const std::string impl = cpu::dnnl_matmul_impl(false, false, false, 1024, 1024, 1024);
  if (want < Isa::avx512) {
    EXPECT_EQ(impl.find("avx512"), std::string::npos) << impl;
  }
  if (want < Isa::avx2) {
    EXPECT_EQ(impl.find("avx2"), std::string::npos) << impl;
  }
  // OpenBLAS reads OPENBLAS_CORETYPE when it is loaded: the capped suite sets it with the cap
  // (scripts/test_isa_levels.sh), as the CLI does by restarting itself.
  const char* core = cap && *cap < hw ? cpu::openblas_core_for(*cap) : nullptr;
  if (core) {
    EXPECT_EQ(strcasecmp(openblas_get_corename(), core), 0) << openblas_get_corename() << " under cap " << core;
  }
  const std::string line = cpu::isa_summary();
  EXPECT_NE(line.find(std::string("isa: ") + cpu::isa_name(want)), std::string::npos) << line;
  RecordProperty("isa", line);
  std::printf("%s\n", line.c_str());
}

// A user's own oneDNN limit stays in force under AR_CPU_ISA: the cap's set_max_cpu_isa replaces the
// variable, so it is given the two levels' common bits (found on a Xeon with AMX: AR_CPU_ISA=avx512_bf16
// with ONEDNN_MAX_CPU_ISA=AVX512_CORE ran bf16 GEMMs).
TEST(Isa, CapStaysWithinTheUsersOneDnnLimit) {
  const char* prev = std::getenv("ONEDNN_MAX_CPU_ISA");
  const char* prev_old = std::getenv("DNNL_MAX_CPU_ISA");
  const std::string keep = prev ? prev : "", keep_old = prev_old ? prev_old : "";
  unsetenv("ONEDNN_MAX_CPU_ISA");
  unsetenv("DNNL_MAX_CPU_ISA");
  EXPECT_EQ(cpu::dnnl_isa_from_env(), std::nullopt);
  setenv("DNNL_MAX_CPU_ISA", "avx2", 1);  // the older name, any case
  EXPECT_EQ(cpu::dnnl_isa_from_env(), std::optional<int>(0x7));
  setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);  // the newer name wins
  EXPECT_EQ(cpu::dnnl_isa_from_env(), std::optional<int>(0x27));
  setenv("ONEDNN_MAX_CPU_ISA", "ALL", 1);
  EXPECT_EQ(cpu::dnnl_isa_from_env(), std::nullopt);
  setenv("ONEDNN_MAX_CPU_ISA", "AVX9000", 1);  // oneDNN ignores a name it does not know
  EXPECT_EQ(cpu::dnnl_isa_from_env(), std::nullopt);
  const int bf16 = cpu::dnnl_isa_for(Isa::avx512_bf16), core = cpu::dnnl_isa_for(Isa::avx512);
  const int avx2 = cpu::dnnl_isa_for(Isa::avx2);
  EXPECT_EQ(cpu::dnnl_isa_within(bf16, std::nullopt), bf16);
  EXPECT_EQ(cpu::dnnl_isa_within(bf16, core), core) << "the user's lower limit";
  EXPECT_EQ(cpu::dnnl_isa_within(avx2, core), avx2) << "the cap's lower level";
  EXPECT_EQ(cpu::dnnl_isa_within(bf16, 0x407), avx2) << "AVX2_VNNI and AVX512_CORE_BF16 share AVX2";
  unsetenv("ONEDNN_MAX_CPU_ISA");
  unsetenv("DNNL_MAX_CPU_ISA");
  if (prev) setenv("ONEDNN_MAX_CPU_ISA", keep.c_str(), 1);
  if (prev_old) setenv("DNNL_MAX_CPU_ISA", keep_old.c_str(), 1);
}

// OpenBLAS's core: the level's own where AR_CPU_ISA caps below the CPU, or where OpenBLAS took a core
// without AVX2 on a CPU with it (Debian 12's OpenBLAS 0.3.21 runs an Emerald Rapids Xeon on Prescott's
// SSE3 kernels); OpenBLAS's own choice elsewhere, and always a user's OPENBLAS_CORETYPE.
TEST(Isa, OpenBlasCoreIsTheLevelsWhereOpenBlasDoesNotKnowTheCpu) {
  EXPECT_EQ(cpu::openblas_core_level("Haswell"), Isa::avx2);
  EXPECT_EQ(cpu::openblas_core_level("ZEN"), Isa::avx2);
  EXPECT_EQ(cpu::openblas_core_level("SkylakeX"), Isa::avx512);
  EXPECT_EQ(cpu::openblas_core_level("Cooperlake"), Isa::avx512_bf16);
  EXPECT_EQ(cpu::openblas_core_level("Prescott"), Isa::scalar);
  EXPECT_EQ(cpu::openblas_core_level("Sandybridge"), Isa::scalar);  // AVX without AVX2
  for (Isa l : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx})
    EXPECT_EQ(cpu::openblas_core_level(cpu::openblas_core_for(l)), std::min(l, Isa::avx512_bf16)) << cpu::isa_name(l);
  const char* prev = std::getenv("OPENBLAS_CORETYPE");
  const std::string keep = prev ? prev : "";
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  EXPECT_EQ(cpu::openblas_core_to_set("Prescott"), nullptr) << "the user's choice stands";
  unsetenv("OPENBLAS_CORETYPE");
  const Isa level = cpu::kernel_isa();
  const std::optional<Isa> cap = cpu::isa_cap();
  const bool capped = cap && *cap < cpu::cpu_features().level();
  if (level >= Isa::avx2) {
    const char* want = cpu::openblas_core_for(level);
    EXPECT_STREQ(cpu::openblas_core_to_set("Prescott"), want);
    EXPECT_STREQ(cpu::openblas_core_to_set("some future core"), want);
  }
  const char* own = cpu::openblas_core_to_set(cpu::openblas_core_for(level));
  if (capped) {
    EXPECT_STREQ(own, cpu::openblas_core_for(level));
  } else {
    EXPECT_EQ(own, nullptr) << "OpenBLAS's own choice at the level stands";
  }
  if (prev) setenv("OPENBLAS_CORETYPE", keep.c_str(), 1);
}

TEST(Isa, UnknownCapIsAClearError) {
  const char* prev = std::getenv("AR_CPU_ISA");
  const std::string keep = prev ? prev : "";
  setenv("AR_CPU_ISA", "avx9000", 1);
  try {
    (void)cpu::isa_cap();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AR_CPU_ISA"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("avx2"), std::string::npos) << e.what();
  }
  if (prev) setenv("AR_CPU_ISA", keep.c_str(), 1);
  else unsetenv("AR_CPU_ISA");
}

TEST(Isa, ExpSameBitsOnEveryLevel) {
  const std::vector<float> x = every_class();
  std::vector<float> want = x;
  cpu::exp_inplace(want.data(), int64_t(want.size()), Isa::scalar);
  for (Isa l : runnable_levels()) {
    std::vector<float> got = x;
    cpu::exp_inplace(got.data(), int64_t(got.size()), l);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << cpu::isa_name(l) << " x bits " << std::hex << bits_of(x[i]);
    for (int64_t n = 0; n <= 40; ++n) {  // every tail, and nothing written past n
      std::vector<float> t(x.begin() + 1000, x.begin() + 1000 + 48);
      cpu::exp_inplace(t.data(), n, l);
      for (int64_t i = 0; i < 48; ++i)
        ASSERT_EQ(bits_of(t[size_t(i)]), bits_of(i < n ? want[size_t(1000 + i)] : x[size_t(1000 + i)]))
            << cpu::isa_name(l) << " n " << n << " i " << i;
    }
  }
}

TEST(Isa, Bf16ConversionsSameBitsOnEveryLevel) {
  const std::vector<float> x = every_class();
  for (Isa l : runnable_levels()) {
    for (int64_t n : {int64_t(x.size()), int64_t(0), int64_t(1), int64_t(7), int64_t(15), int64_t(17), int64_t(33)}) {
      std::vector<uint16_t> b(size_t(n) + 8, 0xabcd);
      cpu::fp32_to_bf16_serial(x.data(), b.data(), n, l);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(b[size_t(i)], f32_to_bf16(x[size_t(i)])) << cpu::isa_name(l) << " bits " << std::hex << bits_of(x[size_t(i)]);
      for (size_t i = size_t(n); i < b.size(); ++i) ASSERT_EQ(b[i], 0xabcd) << "written past the end";
      std::vector<float> back(size_t(n) + 8, 7.f);
      cpu::bf16_to_fp32_serial(b.data(), back.data(), n, l);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(back[size_t(i)]), uint32_t(b[size_t(i)]) << 16);
      for (size_t i = size_t(n); i < back.size(); ++i) ASSERT_EQ(back[i], 7.f) << "written past the end";
    }
  }
}
