#include "quant/qdq.h"

#include "quant/qdq_fixed.h"

#include "core/error.h"

namespace ar::quant {

QdqShape make_qdq_shape(int64_t out, int64_t in, int bits, int64_t group_size, bool sym) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    fail(ErrorKind::InvalidInput, "--bits " + std::to_string(bits) + " is not supported (2, 3, 4, 8)");
  if (group_size == 0 || group_size < -1)
    fail(ErrorKind::InvalidInput, "--group_size " + std::to_string(group_size) + " is not supported (-1 or > 0)");
  QdqShape sh;
  sh.out = out;
  sh.in = in;
  sh.bits = bits;
  sh.sym = sym;
  sh.group = (group_size == -1 || group_size > in) ? in : group_size;  // a row shorter than g is one group
  return sh;
}

void qdq_minmax(Context& ctx, const QdqShape& sh, const float* W, float* wmin0, float* wmax0) {
  ctx.pool().parallel_for(sh.out, [&](int64_t r0, int64_t r1) { qdq_minmax<float>(sh, W, wmin0, wmax0, r0, r1); },
                          ThreadPool::grain(sh.in));
}

void qdq_fwd(Context& ctx, const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
             const float* wmin0, const float* wmax0, float* What, float* scale, float* zero) {
  const cpu::Isa isa = cpu::kernel_isa();
  ctx.pool().parallel_for(sh.out, [&](int64_t r0, int64_t r1) {
    qdq_fwd_rows(sh, W, V, alpha, beta, wmin0, wmax0, What, scale, zero, r0, r1, isa);
  }, ThreadPool::grain(4 * sh.in));
}

void qdq_fwd(Context& ctx, const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
             const float* wmin0, const float* wmax0, uint16_t* What, float* scale, float* zero) {
  const cpu::Isa isa = cpu::kernel_isa();
  ctx.pool().parallel_for(sh.out, [&](int64_t r0, int64_t r1) {
    qdq_fwd_rows(sh, W, V, alpha, beta, wmin0, wmax0, What, scale, zero, r0, r1, isa);
  }, ThreadPool::grain(4 * sh.in));
}

void qdq_bwd(Context& ctx, const QdqShape& sh, const float* W, const float* V, const float* alpha, const float* beta,
             const float* wmin0, const float* wmax0, const float* dWhat, float* dV, float* dalpha, float* dbeta) {
  ctx.pool().parallel_for(sh.out, [&](int64_t r0, int64_t r1) {
    qdq_bwd_rows(sh, W, V, alpha, beta, wmin0, wmax0, dWhat, dV, dalpha, dbeta, r0, r1);
  }, ThreadPool::grain(8 * sh.in));
}

void qdq_fixed_fwd(Context& ctx, const FixedQdq& f, const float* W, const float* V, const float* s, const float* m,
                   float* What) {
  ctx.pool().parallel_for(f.out, [&](int64_t r0, int64_t r1) { qdq_fixed_fwd<float>(f, W, V, s, m, What, r0, r1); },
                          ThreadPool::grain(4 * f.in));
}

void qdq_fixed_fwd(Context& ctx, const FixedQdq& f, const float* W, const float* V, const float* s, const float* m,
                   uint16_t* What) {
  ctx.pool().parallel_for(f.out, [&](int64_t r0, int64_t r1) {
    qdq_fixed_fwd<float, uint16_t>(f, W, V, s, m, What, r0, r1);
  }, ThreadPool::grain(4 * f.in));
}

}  // namespace ar::quant
