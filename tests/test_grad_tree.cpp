// The weight-gradient tree in one pass (kernels/cpu/grad_tree_bf16.cpp, grad_tree_f32.cpp): bit for bit
// the tree of the leaves' own products, summed in fp32 by the steps as written; on one and two
// threads; shapes that are not whole tiles; leaves without rows; the old dW and outside addends of a
// single leaf (the tuner's linear_bwd). A bf16 leaf's product is the gemm_rows_bf16 chain of A = dy^T
// and B = x (that kernel is checked against double in test_gemm_rows_bf16.cpp), an fp32 one
// sgemm_fma's definition (sgemm_fma_ref: one FMA chain per element). Bad step lists are refused. The
// bf16 tests skip without AVX512_BF16, the fp32 ones below AVX2 (the scalar cap).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/sgemm_fma.h"

using namespace ar;

namespace {

// The two kernels' operands and definitions. Bf16: a leaf's own product is the row-independent GEMM on
// dy^T [out, rows] and x [rows, in]; F32: sgemm_fma_ref with op(A) = dy^T.
struct Bf16 {
  using Elem = uint16_t;
  using Leaf = cpu::GradLeafBf16;
  static Elem of(float v) { return f32_to_bf16(v); }
  static bool supported() { return cpu::gemm_rows_bf16_supported(); }
  static void run(Context& ctx, const std::vector<Leaf>& l, const std::vector<cpu::GradTreeStep>& s, cpu::Addends e,
                  int64_t out, int64_t in, float* dW) {
    cpu::weight_grad_tree_bf16(ctx, l, s, e, out, in, dW);
  }
  static void product(Context& ctx, const Elem* dy, const Elem* x, int64_t r, int64_t out, int64_t in, float* P) {
    std::vector<uint16_t> dyt(size_t(out * r));
    for (int64_t t = 0; t < r; ++t)
      for (int64_t o = 0; o < out; ++o) dyt[size_t(o * r + t)] = dy[t * out + o];
    cpu::gemm_rows_bf16(ctx, false, out, in, r, 1.f, dyt.data(), r, x, in, 0.f, P, in);
  }
};
struct F32 {
  using Elem = float;
  using Leaf = cpu::GradLeafF32;
  static Elem of(float v) { return v; }
  static bool supported() { return cpu::weight_grad_tree_f32_supported(); }
  static void run(Context& ctx, const std::vector<Leaf>& l, const std::vector<cpu::GradTreeStep>& s, cpu::Addends e,
                  int64_t out, int64_t in, float* dW) {
    cpu::weight_grad_tree_f32(ctx, l, s, e, out, in, dW);
  }
  static void product(Context&, const Elem* dy, const Elem* x, int64_t r, int64_t out, int64_t in, float* P) {
    cpu::SgemmFmaArgs g;
    g.ta = true, g.M = out, g.N = in, g.K = r, g.A = dy, g.lda = out, g.B = x, g.ldb = in, g.C = P, g.ldc = in;
    cpu::sgemm_fma_ref(g, 0, out, 0, in);
  }
};

template <class K>
struct Leaves {
  int64_t out, in;
  std::vector<std::vector<typename K::Elem>> dy, x;
  std::vector<typename K::Leaf> view;
  Leaves(int64_t o, int64_t i, const std::vector<int64_t>& rows, uint32_t seed) : out(o), in(i) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int64_t r : rows) {
      dy.emplace_back(size_t(std::max<int64_t>(r * out, 1)));
      x.emplace_back(size_t(std::max<int64_t>(r * in, 1)));
      for (auto& v : dy.back()) v = K::of(nd(rng));
      for (auto& v : x.back()) v = K::of(nd(rng));
      view.push_back({dy.back().data(), x.back().data(), r});
    }
  }
  std::vector<float> product(Context& ctx, size_t l) const {
    std::vector<float> P(size_t(out * in), 0.f);
    if (view[l].rows > 0) K::product(ctx, dy[l].data(), x[l].data(), view[l].rows, out, in, P.data());
    return P;
  }
};

// The steps on whole matrices, in fp32 (buffer 0 starts as dW0).
template <class K>
std::vector<float> reference(Context& ctx, const Leaves<K>& lv, const std::vector<cpu::GradTreeStep>& steps,
                             const std::vector<const float*>& extra, const std::vector<float>& dW0) {
  std::vector<std::vector<float>> buf(8, std::vector<float>(dW0.size(), 0.f));
  buf[0] = dW0;
  for (size_t l = 0; l < steps.size(); ++l) {
    std::vector<float> c = lv.product(ctx, l);
    auto add = [&](int k) {
      const float* m = k >= 0 ? buf[size_t(k)].data() : extra[size_t(-1 - k)];
      for (size_t i = 0; i < c.size(); ++i) c[i] = c[i] + m[i];
    };
    if (steps[l].accumulate) add(steps[l].dst);
    for (int k : steps[l].adds) add(k);
    buf[size_t(steps[l].dst)] = c;
  }
  return buf[0];
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// quant/expert_grad_tree.cpp's tree over five leaves: a pair in buffer 1, leaf 2 in buffer 2, the last
// pair into dW adding the pending sums, innermost first.
const std::vector<cpu::GradTreeStep> kFiveLeaves = {
    {1, false, {}}, {1, true, {}}, {2, false, {}}, {0, false, {}}, {0, true, {2, 1}}};
// And over eight (a batch of 8): the first pair waits in buffer 0 before the root is written there.
const std::vector<cpu::GradTreeStep> kEightLeaves = {{0, false, {}}, {0, true, {}}, {1, false, {}}, {1, true, {0}},
                                                      {2, false, {}}, {2, true, {}}, {0, false, {}}, {0, true, {2, 1}}};

template <class K>
void expect_tree_of_the_leaves_own_products() {
  Context one(Device{}, 1), two(Device{}, 2);
  struct Case {
    int64_t out, in;
    std::vector<int64_t> rows;
  };
  for (const Case& c : {Case{64, 96, {32, 31, 1, 40, 17}}, Case{45, 70, {7, 0, 33, 2, 0}}, Case{768, 64, {3, 5, 0, 9, 30}},
                        Case{8, 33, {1, 1, 1, 1, 1}}, Case{7, 9, {1, 2, 0, 3, 1}},
                        Case{100, 130, {30, 34, 0, 29, 33, 1, 32, 31}}}) {
    const Leaves<K> lv(c.out, c.in, c.rows, uint32_t(c.out * 131 + c.in));
    const auto& steps = c.rows.size() == 8 ? kEightLeaves : kFiveLeaves;
    const std::vector<float> want = reference(one, lv, steps, {}, std::vector<float>(size_t(c.out * c.in), 0.f));
    for (Context* ctx : {&one, &two}) {
      std::vector<float> got(size_t(c.out * c.in), 123.f);
      K::run(*ctx, lv.view, steps, {}, c.out, c.in, got.data());
      EXPECT_EQ(differing(want, got), 0u) << c.out << " x " << c.in << " on " << ctx->threads() << " threads";
    }
  }
}

template <class K>
void expect_one_leaf_into_dw_then_addends_in_order() {
  Context ctx(Device{}, 2);
  const int64_t out = 40, in = 50;
  const Leaves<K> lv(out, in, {13}, 7);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1e3f);  // large terms: the order of the additions shows
  std::vector<float> dW0(size_t(out * in)), m1(dW0.size()), m2(dW0.size());
  for (auto* v : {&dW0, &m1, &m2})
    for (float& f : *v) f = nd(rng);
  const std::vector<const float*> extra = {m1.data(), m2.data()};
  for (bool accumulate : {false, true}) {
    const std::vector<cpu::GradTreeStep> steps = {{0, accumulate, {-2, -1}}};
    std::vector<float> got = dW0;
    K::run(ctx, lv.view, steps, extra, out, in, got.data());
    EXPECT_EQ(differing(reference(ctx, lv, steps, extra, dW0), got), 0u) << "accumulate " << accumulate;
    // m2 first, then m1: the other order gives other bits somewhere.
    EXPECT_GT(differing(reference(ctx, lv, {{0, accumulate, {-1, -2}}}, extra, dW0), got), 0u);
  }
}

// Outside addends among the tree's own buffers, at several steps, with the old dW read by a later
// step: the kernels keep the addends apart from the buffers (the fp32 one copies them beside).
template <class K>
void expect_addends_among_the_buffers() {
  Context one(Device{}, 1), two(Device{}, 2);
  const std::vector<cpu::GradTreeStep> steps = {
      {1, false, {-2}}, {2, false, {}}, {1, true, {2, -1}}, {0, true, {-1, 1}}, {0, true, {-2}}};
  for (auto [out, in] : {std::pair<int64_t, int64_t>{45, 70}, {768, 64}, {12, 32}}) {
    const Leaves<K> lv(out, in, {7, 0, 33, 2, 5}, uint32_t(out + in));
    std::mt19937 rng{uint32_t(out)};
    std::normal_distribution<float> nd(0.f, 1e3f);
    std::vector<float> dW0(size_t(out * in)), m1(dW0.size()), m2(dW0.size());
    for (auto* v : {&dW0, &m1, &m2})
      for (float& f : *v) f = nd(rng);
    const std::vector<const float*> extra = {m1.data(), m2.data()};
    const std::vector<float> want = reference(one, lv, steps, extra, dW0);
    for (Context* ctx : {&one, &two}) {
      std::vector<float> got = dW0;
      K::run(*ctx, lv.view, steps, extra, out, in, got.data());
      EXPECT_EQ(differing(want, got), 0u) << out << " x " << in << " on " << ctx->threads() << " threads";
    }
  }
}

template <class K>
void expect_bad_steps_refused() {
  Context ctx(Device{}, 1);
  const Leaves<K> lv(16, 32, {4, 4}, 1);
  std::vector<float> dW(16 * 32);
  EXPECT_THROW(K::run(ctx, lv.view, {{0, false, {1}}, {1, false, {}}}, {}, 16, 32, dW.data()), Error);
  EXPECT_THROW(K::run(ctx, lv.view, {{0, false, {-1}}, {0, true, {}}}, {}, 16, 32, dW.data()), Error);
  const std::vector<typename K::Leaf> first = {lv.view[0]};
  EXPECT_THROW(K::run(ctx, first, {{1, false, {}}}, {}, 16, 32, dW.data()), Error);  // no result
  EXPECT_THROW(K::run(ctx, lv.view, {{0, false, {}}}, {}, 16, 32, dW.data()), Error);  // 1 step, 2 leaves
}

#define AR_REQUIRE(K) \
  if (!K::supported()) GTEST_SKIP() << "not at this level (" << cpu::isa_name(cpu::kernel_isa()) << ")"

TEST(GradTreeBf16, EqualsTheTreeOfTheLeavesOwnProducts) {
  AR_REQUIRE(Bf16);
  expect_tree_of_the_leaves_own_products<Bf16>();
}
TEST(GradTreeBf16, OneLeafAccumulatesIntoDwThenAddsTheAddendsInOrder) {
  AR_REQUIRE(Bf16);
  expect_one_leaf_into_dw_then_addends_in_order<Bf16>();
}
TEST(GradTreeBf16, AddendsAmongTheBuffersAtSeveralSteps) {
  AR_REQUIRE(Bf16);
  expect_addends_among_the_buffers<Bf16>();
}
TEST(GradTreeBf16, RefusesStepsThatReadAScratchBufferBeforeWritingIt) {
  AR_REQUIRE(Bf16);
  expect_bad_steps_refused<Bf16>();
}
TEST(GradTreeF32, EqualsTheTreeOfTheLeavesOwnProducts) {
  AR_REQUIRE(F32);
  expect_tree_of_the_leaves_own_products<F32>();
}
TEST(GradTreeF32, OneLeafAccumulatesIntoDwThenAddsTheAddendsInOrder) {
  AR_REQUIRE(F32);
  expect_one_leaf_into_dw_then_addends_in_order<F32>();
}
TEST(GradTreeF32, AddendsAmongTheBuffersAtSeveralSteps) {
  AR_REQUIRE(F32);
  expect_addends_among_the_buffers<F32>();
}
TEST(GradTreeF32, RefusesStepsThatReadAScratchBufferBeforeWritingIt) {
  AR_REQUIRE(F32);
  expect_bad_steps_refused<F32>();
}

}  // namespace
