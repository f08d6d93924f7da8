// Instruction-set levels and their run-time choice. The build targets a baseline (x86-64-v3 by
// default, CMake's AR_BASELINE) and every wider path is a function compiled with its own target
// attribute, named with its level's suffix (`_avx2`, `_avx512`), and chosen here from CPUID:
//   scalar       the plain C++ loops (compiled at the baseline), oneDNN capped at SSE4.1
//   avx2         AVX2 + FMA (+ the rest of x86-64-v3) with the OS saving YMM state
//   avx512       AVX512 F + BW + VL + DQ with ZMM and opmask state
//   avx512_bf16  + AVX512_BF16 (bf16 dot products: --amp's default)
//   amx          + AMX-BF16 and AMX-TILE with tile state (oneDNN's AMX kernels)
// AR_CPU_ISA=<level> caps the process at that level: nothing above it runs, neither our kernels nor
// oneDNN (dnnl::set_max_cpu_isa before its first primitive); OpenBLAS picks its kernel when it is
// loaded, so the CLI re-executes itself with OPENBLAS_CORETYPE matching the cap (restart_for_openblas_core). Every
// path of a kernel with a promise of identical bits is tested for it against the others
// (tests/test_isa.cpp), and the suite runs under the caps (README, "Tests").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ar::cpu {

enum class Isa : uint8_t { scalar, avx2, avx512, avx512_bf16, amx };
constexpr Isa kIsaLevels[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx};

// What the CPU and OS provide (cpuid leaves 1 and 7, xgetbv), limited by AR_CPU_ISA: every feature
// above the cap reads false. Cheap (a few cpuid instructions and a getenv); no cached state.
struct CpuIsa {
  bool avx2 = false;         // AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE; YMM state
  bool avx512 = false;       // AVX512 F + BW + VL + DQ; ZMM and opmask state
  bool avx512_bf16 = false;  // VDPBF16PS / VCVTNEPS2BF16 usable (implies avx512)
  bool amx_bf16 = false;     // AMX-BF16 + AMX-TILE present and tile state enabled in XCR0
  Isa level() const;         // the highest level whose features (and all below) are present
};
CpuIsa cpu_isa();
// The same without the cap: what the hardware has.
CpuIsa cpu_features();
// AR_CPU_ISA parsed (nullopt when unset or empty); an unknown value throws InvalidInput naming it.
std::optional<Isa> isa_cap();

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);
// The level every dispatched kernel of this process runs: cpu_isa().level(), read once.
Isa kernel_isa();
// x86-64-v3's features (the default build's baseline) present: main() refuses to start without them.
bool has_x86_64_v3();
// oneDNN's own cap for a level (dnnl::cpu_isa as its integer value), for set_max_cpu_isa.
int dnnl_isa_for(Isa isa);
// The limit a user set in oneDNN's own variable (ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA; oneDNN
// 2.x's names, any case) as its integer value; nullopt when unset or not a name oneDNN knows (it then
// ignores the variable too). oneDNN's levels are bit masks: a level contains those whose bits it has.
std::optional<int> dnnl_isa_from_env();
// The level oneDNN runs under a cap: the cap's, within the user's own limit where one is set (their
// common bits: set_max_cpu_isa would otherwise replace the variable's limit and raise oneDNN above it).
int dnnl_isa_within(int cap, std::optional<int> user);
// OpenBLAS's core name for a level (OPENBLAS_CORETYPE): its widest kernels the level can run.
const char* openblas_core_for(Isa isa);
// The level an OpenBLAS core's kernels need (openblas_get_corename's names, any case): scalar for the
// pre-AVX2 cores and names this table does not know.
Isa openblas_core_level(std::string_view core);
// OPENBLAS_CORETYPE for this process to restart with, or nullptr where OpenBLAS's own choice (`core`,
// openblas_get_corename) stands: the level's core where AR_CPU_ISA caps below the CPU, or where OpenBLAS
// did not know the CPU and took a core without AVX2 on a CPU with it (Debian 12's OpenBLAS 0.3.21 takes
// an Emerald Rapids Xeon for a Prescott and runs its SSE3 kernels). Never where OPENBLAS_CORETYPE is set.
const char* openblas_core_to_set(std::string_view core);
// Executes this program again (/proc/self/exe, same argv) with OPENBLAS_CORETYPE set where
// openblas_core_to_set asks for it; returns where nothing is to be done, or where the restart failed
// (with a warning: OpenBLAS then runs the core it chose, and the start summary names it). Call first in
// main(), before any thread starts. Throws InvalidInput for an unknown AR_CPU_ISA.
void restart_for_openblas_core(char** argv);

// One line for the start summary: the level (and the cap), and what each hot path runs: the fp32 and
// bf16 GEMM kernels (oneDNN implementation, OpenBLAS core), QDQ backward, exp, bf16 conversion.
std::string isa_summary();

}  // namespace ar::cpu
