#include "kernels/cuda/qdq_fp.h"

#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/launch.h"

namespace ar::cuda {

namespace {

using quant::FpElem;
using quant::FpFamily;
using quant::FpQdqShape;
namespace fe = quant::fp_elem;

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(uint16_t* p, float v) { *p = f32_to_bf16(v); }

// One thread per element (grid-stride): its tile's scale, then its QDQ; a tile's first element also
// reports the scale.
template <FpFamily F, FpElem E, class Out>
__global__ void fwd_kernel(FpQdqShape sh, const float* W, const float* V, const float* beta, const float* init,
                           const float* amax, Out* What, float* scale) {
  const int64_t total = sh.out * sh.in, vw = sh.padded_in(), across = sh.tiles_across();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / sh.in, c = i - r * sh.in, t = (r / sh.tile_rows) * across + c / sh.tile_cols;
    const fe::TileScale ts = fe::tile_scale(sh, amax[t], fe::coeff(beta, init, t));
    if (scale && r % sh.tile_rows == 0 && c % sh.tile_cols == 0) scale[t] = ts.reported;
    store(What + i, fe::qdq<F, E>(ts, W[i], V ? V[r * vw + c] : 0.0f));
  }
}

// One thread per tile: dV element by element, and the scale's sums over the tile in element order in
// double (rows, then columns), as quant/qdq_fp.cpp's bwd_tiles adds them.
template <FpFamily F, FpElem E>
__global__ void bwd_kernel(FpQdqShape sh, const float* W, const float* V, const float* beta, const float* init,
                           const float* amax, const float* dWhat, float* dV, float* dbeta) {
  const int64_t vw = sh.padded_in();
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < sh.tiles();
       t += int64_t(gridDim.x) * blockDim.x) {
    const fe::TileScale ts = fe::tile_scale(sh, amax[t], fe::coeff(beta, init, t));
    const fe::Span s = fe::tile_span(sh, t);
    double gq = 0, gw = 0;
    for (int64_t r = s.r0; r < s.r1; ++r)
      for (int64_t c = s.c0; c < s.c1; ++c) {
        const int64_t i = r * sh.in + c;
        float q = 0, du = 0;
        fe::grad<F, E>(ts, W[i], V ? V[r * vw + c] : 0.0f, dWhat[i], q, du);
        if (dV) dV[r * vw + c] = du;
        gq += double(dWhat[i]) * q;
        gw += double(du) * W[i];
      }
    if (dbeta) dbeta[t] = fe::beta_grad(sh, ts, amax[t], init ? init[t] : 1.0f, gq, gw);
  }
}

void refuse_large_tiles(const DeviceContext& ctx, const FpQdqShape& sh) {
  if (sh.tile_rows * sh.tile_cols > kMaxDeviceFpTile)
    fail(ErrorKind::Unsupported, ctx.name() + ": float QDQ tiles of " + std::to_string(sh.tile_rows) + " x " +
                                     std::to_string(sh.tile_cols) + " (one scale per tensor) are not run on the device");
}

// Calls fn.template operator()<F, E>() for the shape's family and element.
template <class Fn>
void dispatch(const FpQdqShape& sh, Fn&& fn) {
  const bool small = sh.elem == FpElem::E2M1;
  switch (sh.family) {
    case FpFamily::Mx:
      return small ? fn.template operator()<FpFamily::Mx, FpElem::E2M1>()
                   : fn.template operator()<FpFamily::Mx, FpElem::E4M3>();
    case FpFamily::MxRceil:
      return small ? fn.template operator()<FpFamily::MxRceil, FpElem::E2M1>()
                   : fn.template operator()<FpFamily::MxRceil, FpElem::E4M3>();
    case FpFamily::Nvfp4: return fn.template operator()<FpFamily::Nvfp4, FpElem::E2M1>();
    case FpFamily::Fp8: return fn.template operator()<FpFamily::Fp8, FpElem::E4M3>();
  }
}

}  // namespace

void fp_qdq_fwd(DeviceContext& ctx, const FpQdqShape& sh, const float* W, const float* V, const float* beta,
                const float* init, const float* amax, float* What, uint16_t* What16, float* scale) {
  refuse_large_tiles(ctx, sh);
  const unsigned blocks = grid_blocks(sh.out * sh.in, kThreads);
  dispatch(sh, [&]<FpFamily F, FpElem E>() {
    if (What16) fwd_kernel<F, E><<<blocks, kThreads, 0, ctx.stream()>>>(sh, W, V, beta, init, amax, What16, scale);
    else fwd_kernel<F, E><<<blocks, kThreads, 0, ctx.stream()>>>(sh, W, V, beta, init, amax, What, scale);
  });
  check(cudaGetLastError(), ctx.index(), "float QDQ forward launch");
}

void fp_qdq_bwd(DeviceContext& ctx, const FpQdqShape& sh, const float* W, const float* V, const float* beta,
                const float* init, const float* amax, const float* dWhat, float* dV, float* dbeta) {
  refuse_large_tiles(ctx, sh);
  const unsigned blocks = grid_blocks(sh.tiles(), kThreads);
  dispatch(sh, [&]<FpFamily F, FpElem E>() {
    bwd_kernel<F, E><<<blocks, kThreads, 0, ctx.stream()>>>(sh, W, V, beta, init, amax, dWhat, dV, dbeta);
  });
  check(cudaGetLastError(), ctx.index(), "float QDQ backward launch");
}

}  // namespace ar::cuda
