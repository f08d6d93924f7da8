#!/usr/bin/env bash
# Proves that a binary holds no instruction above its build's baseline outside the dispatched
# functions (kernels/cpu/isa.h): every function whose name carries an ISA suffix (`_avx2`, `_avx512`)
# may use its own level; everything else must stay at the baseline. Static check over the whole
# disassembly (objdump), so it covers paths no test happens to run, on any machine.
#   x86-64-v3: no EVEX-encoded instruction (first opcode byte 0x62: AVX-512), no opmask or ZMM
#              register, no AMX instruction outside `_avx512` functions.
#   x86-64-v2: additionally no VEX-encoded instruction (0xc4 / 0xc5: AVX, AVX2, FMA, BMI), LZCNT or
#              MOVBE outside `_avx2` / `_avx512` functions.
# Usage: scripts/check_isa_baseline.sh x86-64-v3|x86-64-v2 FILE...   (exit 1 and a list on a finding)
set -euo pipefail
level=${1:?usage: check_isa_baseline.sh x86-64-v3|x86-64-v2 FILE...}
shift
[[ $level == x86-64-v3 || $level == x86-64-v2 ]] || { echo "check_isa_baseline: unknown level $level" >&2; exit 2; }
status=0
for f in "$@"; do
  [[ -f $f ]] || { echo "check_isa_baseline: no file $f" >&2; exit 2; }
  report=$(objdump -d -w -C --no-addresses "$f" | awk -v level="$level" '
    /^<.*>:$/ { fn = $0; next }                         # a function starts: "<name>:"
    /^\t/ {
      n = split($0, part, "\t")                         # "", raw bytes, mnemonic and operands
      if (n < 3) next
      split(part[2], b, " ")
      i = 1
      while (b[i] == "67" || b[i] == "f0") i++          # prefixes an EVEX / VEX instruction may carry
      op = b[i]; insn = part[3]
      evex = (op == "62") || insn ~ /%zmm|%k[0-7]/ || insn ~ /^(tile|tdp|ldtilecfg|sttilecfg)/
      vex = (op == "c4" || op == "c5") || insn ~ /^(lzcnt|movbe)/
      bad = 0
      if (evex && fn !~ /_avx512/) bad = 1
      if (level == "x86-64-v2" && vex && fn !~ /_avx2|_avx512/) bad = 1
      if (bad) { count[fn]++; if (!(fn in first)) first[fn] = insn }
    }
    END { for (f in count) printf "  %s: %d instruction(s) above the baseline, first: %s\n", f, count[f], first[f] }')
  if [[ -n $report ]]; then
    echo "check_isa_baseline: $f has instructions above $level outside dispatched functions:"
    echo "$report" | sort | head -40
    status=1
  else
    echo "check_isa_baseline: $f: nothing above $level outside dispatched functions"
  fi
done
exit $status
