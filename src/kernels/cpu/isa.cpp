// CPU feature detection for the bf16 kernels (kernels/cpu/bf16_ops.h): cpuid leaf 7 for the
// instruction sets, xgetbv (XCR0) for the register state the OS saves. No cached state: a few cpuid
// instructions per call. Tested in tests/test_kernels_bf16.cpp (consistent with /proc/cpuinfo flags).
//   leaf 7.0 EBX: bit 16 AVX512F, 30 AVX512BW, 31 AVX512VL;  EDX: bit 22 AMX-BF16, 24 AMX-TILE
//   leaf 7.1 EAX: bit 5 AVX512_BF16
//   XCR0: bits 1, 2 (SSE, AVX), 5-7 (opmask, ZMM upper halves, ZMM16-31); 17, 18 (tile config, data)
#include <cpuid.h>

#include "kernels/cpu/bf16_ops.h"

namespace ar::cpu {

namespace {
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t(hi) << 32 | lo;
}
}  // namespace

CpuIsa cpu_isa() {
  CpuIsa isa;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return isa;  // no OSXSAVE: no xgetbv
  const uint64_t x = xcr0();
  const bool zmm_state = (x & 0xe6) == 0xe6, tile_state = (x & 0x60000) == 0x60000;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return isa;
  const unsigned max_sub = a;
  isa.avx512 = zmm_state && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));
  isa.amx_bf16 = tile_state && (d & (1u << 22)) && (d & (1u << 24));
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) isa.avx512_bf16 = isa.avx512 && (a & (1u << 5));
  return isa;
}

}  // namespace ar::cpu
