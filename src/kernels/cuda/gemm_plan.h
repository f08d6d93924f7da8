// A cuBLASLt GEMM plan: the matmul descriptor, the three matrix layouts and the algorithm the heuristic
// chose, for one operand type, transposition, shape, leading dimensions and operand alignment. A context
// builds each plan once (DeviceContext::gemm_plans, an LruCache) instead of creating descriptors and
// querying the heuristic on every product: a tuning iteration repeats the same few dozen shapes.
#pragma once
#include <cublasLt.h>

#include <compare>
#include <cstdint>

#include "core/lru_cache.h"

namespace ar::cuda {

struct GemmKey {
  bool bf16 = false;  // bf16 operands (else fp32); the output is fp32 either way
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0;  // bytes: the largest power of two up to 256 dividing the address
  auto operator<=>(const GemmKey&) const = default;
};

// Owns its descriptors (destroyed with it); movable, not copyable.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  GemmPlan() = default;
  GemmPlan(GemmPlan&& o) noexcept { swap(o); }
  GemmPlan& operator=(GemmPlan&& o) noexcept {
    swap(o);
    return *this;
  }
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan();

 private:
  void swap(GemmPlan& o) noexcept;
};

// Plans kept per context; a run uses a few dozen shapes, the bound only caps a pathological caller.
using GemmPlans = LruCache<GemmKey, GemmPlan>;
constexpr size_t kGemmPlanCapacity = 256;

}  // namespace ar::cuda
