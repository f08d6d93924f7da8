// The start summary's ISA line (kernels/cpu/isa.h): the level this process runs and what each hot
// path executes at it, read from the libraries themselves (oneDNN's implementation string for a
// block-shaped unit, OpenBLAS's core name; at avx2 our own kernel, kernels/cpu/sgemm_fma.h).
#include <cblas.h>

#include "kernels/cpu/bf16_ops.h"
#include "kernels/cpu/isa.h"

namespace ar::cpu {

std::string isa_summary() {
  const Isa level = kernel_isa(), hw = cpu_features().level();
  const std::optional<Isa> cap = isa_cap();
  std::string s = std::string("isa: ") + isa_name(level);
  if (cap && *cap < hw) s += std::string(" (capped by AR_CPU_ISA; the CPU has ") + isa_name(hw) + ")";
  if (dnnl_f32_is_brgemm())
    s += std::string("; fp32 GEMM: oneDNN ") + dnnl_matmul_impl(false, false, false, 2048, 2048, 2048) +
         ", OpenBLAS " + openblas_get_corename() + " (small and strided products)";
  else if (level == Isa::avx2)
    s += std::string("; fp32 GEMM: own FMA-chain kernel (avx2; oneDNN's fp32 matmul here is ") +
         dnnl_matmul_impl(false, false, false, 2048, 2048, 2048) + ": not used)";
  else
    s += std::string("; fp32 GEMM: OpenBLAS ") + openblas_get_corename() + " (oneDNN's fp32 matmul here is " +
         dnnl_matmul_impl(false, false, false, 2048, 2048, 2048) + ": not used)";
  s += std::string("; bf16 GEMM: ") +
       (bf16_gemm_supported() ? "oneDNN " + dnnl_matmul_impl(true, false, false, 2048, 2048, 2048) : "none");
  const char* simd = level >= Isa::avx512 ? "avx512" : level >= Isa::avx2 ? "avx2" : "scalar";
  return s + "; QDQ backward, exp, bf16 conversion: " + simd;
}

}  // namespace ar::cpu
