// Fake quantization of a Linear weight to the floating-point schemes, forward and straight-through
// backward, with AutoRound's arithmetic (auto_round/data_type/{mxfp,nvfp,fp8}.py; autoround-spec.md §2):
//
//   MX       tiles of 1 x 32 (MXFP4: E2M1 elements, MXFP8: E4M3), a power-of-two scale 2^E per tile:
//              M = max|w| * c   (c = init * beta, the tuned max-scale coefficient; init = 1 unless a
//                                search set it)
//              floor: E = clamp(floor(log2 M) - emax, -127, 127)   rceil: E = clamp(ceil(log2(M / max_norm)), ...)
//              (M == 0: the log is taken as 1, as AutoRound does)
//              w^ = round(clamp(w / 2^E + V, +-max_norm)) * 2^E
//   NVFP4    tiles of 1 x 16, E2M1 elements, global G = 448 * 6 / max|W| (fp32, per tensor or shared by
//            fused layers), block scale S = e4m3(clamp(G * (M * (1/6)), +-448)):
//              os = 1 / (S * (1/G));  w^ = round(clamp(w * os + V, +-6)) * (1 / os)
//   FP8      E4M3 elements, one scale per tile (1 x in: per channel, out x in: per tensor, 128 x 128: block):
//              s = max(M / 448, 1 / (448 * 512));  w^ = round(clamp(w / s + V, +-448)) * s
//
// `round` is round-to-nearest-even onto the element grid (core/small_float.h). Every product and quotient
// is rounded in fp32 in AutoRound's order (this file's translation unit is built with -ffp-contract=off),
// so forward outputs and scales are bit-identical to AutoRound's on the same inputs; the exponent is
// taken from the exact binary exponent where torch calls log2 (the two differ only within a few ulps
// of a power of two).
//
// Backward is what autograd computes through AutoRound's straight-through estimators (torch 2.15:
// clamp passes no gradient at its bounds, only strictly inside):
//   dV = d w^/du where |u| < max_norm, else 0, u the clamped argument; d round(u)/du per element is
//        MX    q/u where |u| >= 2^(emin+1) (the floor_ste'd private exponent, clipped below at emin,
//              passes its gradient above it), 1 below, 0 at u == 0 (torch.sign's gradient) and where
//              q = +-max_norm (quant_element clamps again after rounding);
//        NVFP4 1, but 0 at u == 0 (cast_to_fp4 goes through abs and sign) and where q = +-6;
//        FP8   1 (the cast's STE)
//   dbeta through the tile scale: MX via 2^E (floor_ste / ceil_ste pass; E at +-127 stops it), NVFP4
//        via os and the e4m3 STE (S at +-448 stops it), FP8 via s (the 1/(448*512) floor stops it).
// A tile whose scale is 0 (an all-zero tile) gets dbeta = 0 where torch would produce NaN.
//
// Layout: W [out, in]; V [out, padded_in] with padded_in = tiles across * tile width (zero-padded
// columns ignored, as in qdq_ref.h); beta, init, amax, scale: one per tile, row-major over the tiles.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/context.h"
#include "quant/qdq_fp_elem.h"

namespace ar::quant {

// AutoRound's tile for a group size (reshape_pad_tensor_by_group_size): g > 0 -> 1 x g (1 x in when
// in < g), g == -1 -> 1 x in (per channel), g == 0 -> out x in (per tensor); block_rows > 0 ->
// block_rows x g (FP8_BLOCK's 128 x 128). Refuses a family/element pairing AutoRound has no such
// scheme for (NVFP4 is E2M1 only, FP8 E4M3 only).
FpQdqShape make_fp_qdq_shape(FpFamily family, FpElem elem, int64_t out, int64_t in, int64_t group_size,
                             int64_t block_rows = 0);

// NVFP4's global scale of a weight: 448 * 6 / max|W| in fp32, 0 for an all-zero weight.
float nvfp4_global_scale(const float* W, int64_t n);

// max|w| per tile (the tuning range: from the FP weight, fixed while tuning).
void fp_qdq_amax(const FpQdqShape& sh, const float* W, float* amax);

// Forward. V, beta, init may be null (0, 1, 1). scale (optional) gets each tile's scale: MX the
// exponent E, NVFP4 the e4m3 block scale S, FP8 s.
void fp_qdq_fwd(const FpQdqShape& sh, const float* W, const float* V, const float* beta, const float* init,
                const float* amax, float* What, float* scale);

// Backward from dWhat: dV (the real columns; padding untouched) and dbeta (one per tile); either may
// be null. beta is used as given (the tuner keeps it in [0, 1]).
void fp_qdq_bwd(const FpQdqShape& sh, const float* W, const float* V, const float* beta, const float* init,
                const float* amax, const float* dWhat, float* dV, float* dbeta);

// Tile rows [t0, t1) of `sh` as a shape of its own (tiles are independent): its arrays start at row
// t0 * tile_rows of W and V and at tile t0 * tiles_across of the per-tile arrays.
FpQdqShape fp_qdq_tile_rows(const FpQdqShape& sh, int64_t t0, int64_t t1);

// The forward over blocks of tile rows on the context's pool; What in fp32, or bf16 (`What16`, with
// `What` null: the fp32 values rounded to nearest even).
void fp_qdq_fwd(Context& ctx, const FpQdqShape& sh, const float* W, const float* V, const float* beta,
                const float* init, const float* amax, float* What, uint16_t* What16, float* scale);

// The element values (on the E2M1 / E4M3 grid) of a QDQ weight `What` whose tile scales `scale` the
// forward reported: What / step per tile, rounded back onto the grid (exact: What is an element times
// the step, rounded once in fp32). For packing: code = e2m1_encode / e4m3_encode of each value.
void fp_qdq_elements(const FpQdqShape& sh, const float* What, const float* scale, float* elems);

// FP8_STATIC's activation scale from the calibration maximum |x| of a Linear's input, as AutoRound
// computes it: amax / 448 in fp32, at least vLLM's floor 1 / (448 * 512).
inline float fp8_static_input_scale(float amax) {
  return std::max(amax / 448.0f, float(1.0 / (448.0 * 512.0)));
}

}  // namespace ar::quant
