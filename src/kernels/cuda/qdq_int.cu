#include "kernels/cuda/qdq_int.h"

#include <algorithm>

#include "kernels/cuda/launch.h"

namespace ar::cuda {

namespace {

using quant::GroupScale;
using quant::QdqShape;

__device__ GroupScale<float> scale_of(const QdqShape& sh, const float* alpha, const float* beta, const float* wmin0,
                                      const float* wmax0, int64_t k) {
  const float a = alpha ? quant::clamp01(alpha[k]) : 1.f, b = beta ? quant::clamp01(beta[k]) : 1.f;
  return quant::group_scale(sh, a, b, wmin0[k], wmax0[k]);
}

// One thread per weight (grid-stride); the first column of a group also writes its scale and zero.
template <class Out>
__global__ void qdq_fwd_kernel(QdqShape sh, const float* W, const float* V, const float* alpha, const float* beta,
                               const float* wmin0, const float* wmax0, Out* What, float* scale, float* zero) {
  const int64_t ng = sh.groups(), vw = ng * sh.group, total = sh.out * sh.in;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / sh.in, c = i - r * sh.in, gi = c / sh.group, k = r * ng + gi;
    const GroupScale<float> g = scale_of(sh, alpha, beta, wmin0, wmax0, k);
    if (c == gi * sh.group) {
      if (scale) scale[k] = g.s;
      if (zero) zero[k] = g.z;
    }
    quant::store_qdq(What + i, quant::qdq_value(sh, g, W[i], V ? V[r * vw + c] : 0.f));
  }
}

constexpr int kGroupsPerBlock = 8;  // blocks of 16 lanes x 8 groups: two groups per warp

// One group per 16 threads: lane j adds the elements c = j, j + 16, ... in order (qdq_ref.h's group_bwd),
// then the 16 partials combine pairwise by shuffles within the group's half-warp, and lane 0 turns the
// sums into dalpha and dbeta.
__global__ void qdq_bwd_kernel(QdqShape sh, const float* W, const float* V, const float* alpha, const float* beta,
                               const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha,
                               float* dbeta) {
  const int64_t ng = sh.groups(), vw = ng * sh.group, groups = sh.out * ng;
  const int lane = int(threadIdx.x);
  const int64_t k = int64_t(blockIdx.x) * kGroupsPerBlock + threadIdx.y;
  const bool valid = k < groups;  // every thread reaches the shuffles below
  float ps = 0.f, pz = 0.f;
  GroupScale<float> g;
  if (valid) {
    const int64_t r = k / ng, gi = k - r * ng, c0 = gi * sh.group;
    const int64_t len = (sh.in < c0 + sh.group ? sh.in : c0 + sh.group) - c0;
    g = scale_of(sh, alpha, beta, wmin0, wmax0, k);
    const float* w = W + r * sh.in + c0;
    const float* d = dWhat + r * sh.in + c0;
    for (int64_t c = lane; c < len; c += quant::kQdqLanes) {
      const quant::ElemGrad<float> e = quant::qdq_elem_grad(sh, g, w[c], V ? V[r * vw + c0 + c] : 0.f, d[c]);
      if (dV) dV[r * vw + c0 + c] = e.dv;
      quant::add_elem_grad(e, d[c], g.s, ps, pz);
    }
  }
  for (int w = 1; w < quant::kQdqLanes; w *= 2) {
    const float os = __shfl_down_sync(0xffffffffu, ps, unsigned(w), quant::kQdqLanes);
    const float oz = __shfl_down_sync(0xffffffffu, pz, unsigned(w), quant::kQdqLanes);
    if (lane % (2 * w) == 0) {
      ps += os;
      pz += oz;
    }
  }
  if (!valid || lane != 0) return;
  const float ar = alpha ? alpha[k] : 1.f, br = beta ? beta[k] : 1.f;
  quant::group_grads(sh, g, ar, br, quant::clamp01(ar), wmin0[k], wmax0[k], ps, pz, dalpha ? dalpha + k : nullptr,
                     dbeta ? dbeta + k : nullptr);
}

}  // namespace

void qdq_fwd(DeviceContext& ctx, const quant::QdqShape& sh, const float* W, const float* V, const float* alpha,
             const float* beta, const float* wmin0, const float* wmax0, float* What, uint16_t* What16, float* scale,
             float* zero) {
  const int64_t total = sh.out * sh.in;
  if (total == 0) return;
  const unsigned blocks = grid_blocks(total, kThreads);
  if (What16)
    qdq_fwd_kernel<<<blocks, kThreads, 0, ctx.stream()>>>(sh, W, V, alpha, beta, wmin0, wmax0, What16, scale, zero);
  else
    qdq_fwd_kernel<<<blocks, kThreads, 0, ctx.stream()>>>(sh, W, V, alpha, beta, wmin0, wmax0, What, scale, zero);
  check(cudaGetLastError(), ctx.index(), "QDQ forward launch");
}

void qdq_bwd(DeviceContext& ctx, const quant::QdqShape& sh, const float* W, const float* V, const float* alpha,
             const float* beta, const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha,
             float* dbeta) {
  const int64_t groups = sh.out * sh.groups();
  if (groups == 0) return;
  const dim3 block(quant::kQdqLanes, kGroupsPerBlock);
  const unsigned blocks = unsigned((groups + kGroupsPerBlock - 1) / kGroupsPerBlock);
  qdq_bwd_kernel<<<blocks, block, 0, ctx.stream()>>>(sh, W, V, alpha, beta, wmin0, wmax0, dWhat, dV, dalpha, dbeta);
  check(cudaGetLastError(), ctx.index(), "QDQ backward launch");
}

}  // namespace ar::cuda
