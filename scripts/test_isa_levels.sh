#!/usr/bin/env bash
# Runs the test suite at the CPU's own ISA level and again under AR_CPU_ISA caps below it
# (kernels/cpu/isa.h): the whole suite at avx2, the kernel, QDQ and tuning tests (labels kernels,
# quant) at scalar, and the levels between the CPU's own and avx2 (below). Each capped run also caps
# OpenBLAS (OPENBLAS_CORETYPE, read when it loads).
# Ends with a table: levels x labels, the number of tests each ran. Exit status non-zero if any run
# failed. Usage: scripts/test_isa_levels.sh BUILD_DIR [JOBS]
set -uo pipefail
build=${1:?usage: test_isa_levels.sh BUILD_DIR [JOBS]}
jobs=${2:-$(nproc)}
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
native=avx2
has avx512f && has avx512dq && has avx512bw && has avx512vl && native=avx512
[[ $native == avx512 ]] && has avx512_bf16 && native=avx512_bf16
[[ $native == avx512_bf16 ]] && has amx_bf16 && has amx_tile && native=amx
declare -A core=([scalar]=Nehalem [avx2]=Haswell [avx512]=SkylakeX [avx512_bf16]=Cooperlake)
runs=("native:")                                   # level:labels regex ('' = every test)
# The levels between: on an AMX machine the whole suite at avx512_bf16 (its amp kernels, which AMX
# replaces, run nowhere else), and from avx512_bf16 up the kernel and tuning tests at avx512 (oneDNN's
# fp32 kernels without bf16). Both found bugs the native and avx2 runs could not (2026-12-05).
[[ $native == amx ]] && runs+=("avx512_bf16:")
[[ $native == amx || $native == avx512_bf16 ]] && runs+=("avx512:kernels|quant")
[[ $native != avx2 ]] && runs+=("avx2:")
runs+=("scalar:kernels|quant")
status=0
rows=()
for run in "${runs[@]}"; do
  level=${run%%:*} labels=${run#*:}
  args=(--test-dir "$build" -j "$jobs" --output-on-failure)
  [[ -n $labels ]] && args+=(-L "$labels")
  log=$(mktemp)
  start=$SECONDS
  if [[ $level == native ]]; then
    echo "== test suite at the CPU's own level ($native)"
    env -u AR_CPU_ISA ctest "${args[@]}" 2>&1 | tee "$log"
  else
    echo "== test suite capped at AR_CPU_ISA=$level${labels:+ (labels $labels)}"
    AR_CPU_ISA=$level OPENBLAS_CORETYPE=${core[$level]} ctest "${args[@]}" 2>&1 | tee "$log"
  fi
  rc=${PIPESTATUS[0]}
  ((rc != 0)) && status=1
  # "kernels = 16.68 sec*proc (54 tests)" lines of ctest's label summary -> "kernels 54"
  counts=$(awk '/sec\*proc/ { gsub(/[()]/, ""); printf "%s %s, ", $1, $(NF-1) }' "$log")
  verdict=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" || echo "no result")
  rows+=("$(printf '%-12s | %-55s | %4ds | %s' "${level/native/$native}" "$verdict" $((SECONDS - start)) "${counts%, }")")
  rm -f "$log"
done
echo
echo "ISA level   | result                                                  | time  | tests per label"
printf '%s\n' "${rows[@]}"
exit $status
