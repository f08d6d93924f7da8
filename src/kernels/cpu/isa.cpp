// CPU feature detection: cpuid leaves 1 and 7 for the instruction sets, xgetbv (XCR0) for the register
// state the OS saves. No cached state: a few cpuid instructions per call. Tested in tests/test_isa.cpp
// (consistent with /proc/cpuinfo flags, the cap honoured by every path).
//   leaf 1 ECX: bit 12 FMA, 22 MOVBE, 27 OSXSAVE, 29 F16C;  leaf 0x80000001 ECX: bit 5 LZCNT
//   leaf 7.0 EBX: bit 3 BMI1, 5 AVX2, 8 BMI2, 16 AVX512F, 17 AVX512DQ, 30 AVX512BW, 31 AVX512VL
//            EDX: bit 22 AMX-BF16, 24 AMX-TILE;  leaf 7.1 EAX: bit 5 AVX512_BF16
//   XCR0: bits 1, 2 (SSE, AVX), 5-7 (opmask, ZMM upper halves, ZMM16-31); 17, 18 (tile config, data)
#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace ar::cpu {

namespace {
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t(hi) << 32 | lo;
}
constexpr bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

// x86-64-v3 without the YMM-state check (that needs OSXSAVE; has_x86_64_v3 adds it).
bool v3_instructions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool leaf1 = bit(c, 12) && bit(c, 22) && bit(c, 27) && bit(c, 28) && bit(c, 29);  // FMA MOVBE OSXSAVE AVX F16C
  if (!__get_cpuid(0x80000001, &a, &b, &c, &d) || !bit(c, 5)) return false;             // LZCNT
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return leaf1 && bit(b, 3) && bit(b, 5) && bit(b, 8);  // BMI1 AVX2 BMI2
}
}  // namespace

Isa CpuIsa::level() const {
  if (!avx2) return Isa::scalar;
  if (!avx512) return Isa::avx2;
  if (!avx512_bf16) return Isa::avx512;
  return amx_bf16 ? Isa::amx : Isa::avx512_bf16;
}

CpuIsa cpu_features() {
  CpuIsa isa;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !bit(c, 27)) return isa;  // no OSXSAVE: no xgetbv, no AVX state
  const uint64_t x = xcr0();
  const bool ymm_state = (x & 0x6) == 0x6, zmm_state = (x & 0xe6) == 0xe6, tile_state = (x & 0x60000) == 0x60000;
  isa.avx2 = ymm_state && v3_instructions();
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return isa;
  const unsigned max_sub = a;
  isa.avx512 = isa.avx2 && zmm_state && bit(b, 16) && bit(b, 17) && bit(b, 30) && bit(b, 31);
  isa.amx_bf16 = tile_state && bit(d, 22) && bit(d, 24);
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) isa.avx512_bf16 = isa.avx512 && bit(a, 5);
  return isa;
}

CpuIsa cpu_isa() {
  CpuIsa isa = cpu_features();
  const std::optional<Isa> cap = isa_cap();
  if (!cap) return isa;
  isa.avx2 = isa.avx2 && *cap >= Isa::avx2;
  isa.avx512 = isa.avx512 && *cap >= Isa::avx512;
  isa.avx512_bf16 = isa.avx512_bf16 && *cap >= Isa::avx512_bf16;
  isa.amx_bf16 = isa.amx_bf16 && *cap >= Isa::amx;
  return isa;
}

std::optional<Isa> isa_cap() {
  const char* env = std::getenv("AR_CPU_ISA");
  if (!env || !*env) return std::nullopt;
  const std::optional<Isa> cap = parse_isa(env);
  if (!cap)
    fail(ErrorKind::InvalidInput, "AR_CPU_ISA: unknown level '" + std::string(env).substr(0, 64) +
                                      "' (expected scalar, avx2, avx512, avx512_bf16 or amx)");
  return cap;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa l : kIsaLevels)
    if (name == isa_name(l)) return l;
  return std::nullopt;
}

Isa kernel_isa() {
  static const Isa level = cpu_isa().level();  // a property of the process (machine and cap), read once
  return level;
}

bool has_x86_64_v3() { return cpu_features().avx2; }

int dnnl_isa_for(Isa isa) {
  switch (isa) {  // dnnl_cpu_isa_t (oneapi/dnnl/dnnl_types.h)
    case Isa::scalar: return 0x1;       // sse41: oneDNN's lowest JIT level
    case Isa::avx2: return 0x7;         // avx2
    case Isa::avx512: return 0x27;      // avx512_core (F, BW, VL, DQ)
    case Isa::avx512_bf16: return 0xe7; // avx512_core_bf16
    case Isa::amx: return 0x3e7;        // avx512_core_amx
  }
  return 0;
}

std::optional<int> dnnl_isa_from_env() {
  const char* v = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!v || !*v) v = std::getenv("DNNL_MAX_CPU_ISA");
  if (!v || !*v) return std::nullopt;
  std::string name(v);
  for (char& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
  static constexpr std::pair<std::string_view, int> kNames[] = {  // dnnl_cpu_isa_t of oneDNN 2.x
      {"ALL", 0x0},          {"SSE41", 0x1},           {"AVX", 0x3},
      {"AVX2", 0x7},         {"AVX2_VNNI", 0x407},     {"AVX512_MIC", 0xf},
      {"AVX512_MIC_4OPS", 0x1f}, {"AVX512_CORE", 0x27}, {"AVX512_CORE_VNNI", 0x67},
      {"AVX512_CORE_BF16", 0xe7}, {"AVX512_CORE_AMX", 0x3e7}};
  for (const auto& [n, isa] : kNames)
    if (name == n) return isa == 0 ? std::nullopt : std::optional<int>(isa);  // ALL: no limit
  return std::nullopt;
}

int dnnl_isa_within(int cap, std::optional<int> user) { return user ? (cap & *user) : cap; }

const char* openblas_core_for(Isa isa) {
  switch (isa) {  // OpenBLAS's DYNAMIC_ARCH core names
    case Isa::scalar: return "Nehalem";  // SSE4.2, no AVX
    case Isa::avx2: return "Haswell";
    case Isa::avx512: return "SkylakeX";
    case Isa::avx512_bf16: return "Cooperlake";
    case Isa::amx: return "Cooperlake";  // OpenBLAS has no AMX sgemm: its widest fp32 kernels
  }
  return nullptr;
}

Isa openblas_core_level(std::string_view core) {
  std::string name(core);
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (name == "haswell" || name == "zen") return Isa::avx2;
  if (name == "skylakex") return Isa::avx512;
  if (name == "cooperlake" || name == "sapphirerapids") return Isa::avx512_bf16;
  return Isa::scalar;  // Prescott, Nehalem, Sandybridge, ...: no AVX2 kernels
}

const char* openblas_core_to_set(std::string_view core) {
  const std::optional<Isa> cap = isa_cap();  // first: an unknown AR_CPU_ISA is an error in any case
  if (const char* v = std::getenv("OPENBLAS_CORETYPE"); v && *v) return nullptr;
  const Isa hw = cpu_features().level();
  const Isa level = cap ? std::min(*cap, hw) : hw;
  const bool capped = cap && *cap < hw;
  const bool unknown_cpu = level >= Isa::avx2 && openblas_core_level(core) < Isa::avx2;
  return capped || unknown_cpu ? openblas_core_for(level) : nullptr;
}

}  // namespace ar::cpu
