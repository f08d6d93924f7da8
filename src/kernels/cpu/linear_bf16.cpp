// Linear layers under --amp: the GEMMs take bf16 operands with fp32 accumulation (cpu::gemm_bf16);
// inputs, outputs, bias and gradients stay fp32. Layout as cpu::linear_fwd / linear_bwd (ops.h):
// x [n, in], W [out, in], y [n, out]. Each fp32 GEMM operand is rounded to bf16 (nearest even), as
// PyTorch's autocast does: x, W and dy may come rounded already (xb, w, dyb: an activation read by
// several Linears is rounded once, and a producer may write its output in bf16 only, cpu_ops.h; a
// weight is rounded and packed once per QDQ). dW accumulates in fp32.
// Reference: ref::linear_* in double on the bf16-rounded operands (tests/test_kernels_bf16.cpp).
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/ops.h"

namespace ar::cpu {

namespace {
Tensor to_bf16(Context& ctx, const float* x, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::BF16, ctx);
  fp32_to_bf16(ctx, x, t.data<uint16_t>(), n);
  return t;
}

// The bf16 form of an operand: `given`, or `src` rounded into `keep`.
const uint16_t* bf16_of(Context& ctx, const float* src, const uint16_t* given, int64_t n, Tensor& keep) {
  if (given) return given;
  keep = to_bf16(ctx, src, n);
  return keep.data<uint16_t>();
}
}  // namespace

void linear_fwd_bf16(Context& ctx, const float* x, const uint16_t* xb, const float* W, const Bf16Weight* w,
                     const float* b, float* y, int64_t n, int64_t in, int64_t out) {
  Tensor xt, wt;
  xb = bf16_of(ctx, x, xb, n * in, xt);
  if (!w || !w->fwd || !gemm_bf16(ctx, false, n, 1.f, xb, in, *w->fwd, 0.f, y, out)) {
    const uint16_t* Wb = bf16_of(ctx, W, w ? w->b : nullptr, out * in, wt);
    gemm_bf16(ctx, false, true, n, out, in, 1.f, xb, in, Wb, in, 0.f, y, out);
  }
  if (b) add_bias(ctx, b, y, n, out);
}

void linear_fwd_bf16_rows(Context& ctx, const float* x, const uint16_t* xb, const float* W, const Bf16Weight* w,
                          const float* b, float* y, int64_t n, int64_t in, int64_t out) {
  Tensor xt, wt;
  xb = bf16_of(ctx, x, xb, n * in, xt);
  const uint16_t* Wb = bf16_of(ctx, W, w ? w->b : nullptr, out * in, wt);
  gemm_rows_bf16(ctx, true, n, out, in, 1.f, xb, in, Wb, in, 0.f, y, out);
  if (b) add_bias(ctx, b, y, n, out);
}

void linear_dx_bf16_rows(Context& ctx, const float* dy, const uint16_t* dyb, const float* W, const Bf16Weight* w,
                         float* dx, bool accumulate_dx, int64_t n, int64_t in, int64_t out) {
  AR_CHECK(dyb || dy, "linear_dx_bf16_rows: no output gradient");
  Tensor dyt, wt;
  dyb = bf16_of(ctx, dy, dyb, n * out, dyt);
  const uint16_t* Wb = bf16_of(ctx, W, w ? w->b : nullptr, out * in, wt);
  gemm_rows_bf16(ctx, false, n, in, out, 1.f, dyb, out, Wb, in, accumulate_dx ? 1.f : 0.f, dx, in);
}

void linear_bwd_bf16(Context& ctx, const float* dy, const uint16_t* dyb, const float* x, const uint16_t* xb,
                     const float* W, const Bf16Weight* w, float* dx, bool accumulate_dx, float* dW, bool accumulate_dW,
                     float* db, int64_t n, int64_t in, int64_t out, Addends dW_add, PackedB* xp) {
  AR_CHECK(dyb || dy, "linear_bwd_bf16: no output gradient");
  AR_CHECK(!db || dy, "linear_bwd_bf16: a bias gradient needs the fp32 output gradient");
  Tensor dyt;
  dyb = bf16_of(ctx, dy, dyb, n * out, dyt);
  const float beta_dx = accumulate_dx ? 1.f : 0.f;
  if (dx && (!w || !w->dx || !gemm_bf16(ctx, false, n, 1.f, dyb, out, *w->dx, beta_dx, dx, in))) {
    Tensor wt;
    const uint16_t* Wb = bf16_of(ctx, W, w ? w->b : nullptr, out * in, wt);
    gemm_bf16(ctx, false, false, n, in, out, 1.f, dyb, out, Wb, in, beta_dx, dx, in);
  }
  if (dW) {
    Tensor xt;
    xb = bf16_of(ctx, x, xb, n * in, xt);
    const float beta = accumulate_dW ? 1.f : 0.f;
    if (xp && !xp->tried()) xp->pack(ctx, xb, n, in, false);
    if (!xp || !gemm_bf16(ctx, true, out, 1.f, dyb, out, *xp, beta, dW, in, dW_add))
      gemm_bf16(ctx, true, false, out, in, n, 1.f, dyb, out, xb, in, beta, dW, in, dW_add);
  }
  if (db) add_column_sums(ctx, dy, db, n, out);
}

}  // namespace ar::cpu
