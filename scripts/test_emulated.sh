#!/usr/bin/env bash
# The kernels on CPUs this machine is not, under QEMU's user-mode emulator (Debian's qemu-user): an
# instruction the emulated CPU lacks stops the process (SIGILL), and CPUID reports the emulated CPU, so
# the dispatch, oneDNN's JIT and OpenBLAS choose exactly as they would there, with no cap.
#   - the x86-64-v3 build on an AMD EPYC Milan (Zen 3: AVX2 + FMA, no AVX-512): the ISA, exp, QDQ,
#     reference and block tests, and a small quantization end to end;
#   - the x86-64-v2 build on an Intel Nehalem (SSE4.2, no AVX): the ISA, exp, QDQ and reference tests;
#   - the x86-64-v3 CLI on Nehalem: refused with one line, exit 1.
# Usage: scripts/test_emulated.sh BUILD V2_BUILD   (exit non-zero on any failure)
set -euo pipefail
build=${1:?usage: test_emulated.sh BUILD V2_BUILD}
v2=${2:?usage: test_emulated.sh BUILD V2_BUILD}
command -v qemu-x86_64 >/dev/null || { echo "test_emulated: qemu-x86_64 missing (apt-get install qemu-user)" >&2; exit 2; }
filter=--gtest_filter=-Bf16Isa.MatchesProcCpuinfo  # /proc/cpuinfo is the host's under user-mode QEMU
fail=0
run() {  # cpu binary args...
  local cpu=$1 bin=$2
  shift 2
  local t0=$SECONDS
  if env -u AR_CPU_ISA -u OPENBLAS_CORETYPE qemu-x86_64 -cpu "$cpu" "$bin" "$@" > /tmp/ar_emulated.$$ 2>&1; then
    echo "  ok    $cpu $(basename "$bin") $* ($((SECONDS - t0)) s)"
  else
    echo "  FAIL  $cpu $(basename "$bin") $* ($((SECONDS - t0)) s):"
    tail -20 /tmp/ar_emulated.$$
    fail=1
  fi
  grep -h "^isa: " /tmp/ar_emulated.$$ | sed 's/^/        /' || true
}
echo "== x86-64-v3 build on EPYC-Milan (Zen 3, no AVX-512)"
for t in test_isa test_exp test_qdq test_ops_ref_fd test_block; do run EPYC-Milan "$build/tests/$t" --gtest_brief=1 $filter; done
model=$(mktemp -d)
trap 'rm -rf "$model" /tmp/ar_emulated.$$' EXIT
"$build/bench/stream_bench" --write "$model/m" --layers 1 --hidden 128 --inter 256 --heads 4 --kv_heads 2 --vocab 300 > /dev/null
run EPYC-Milan "$build/src/cli/autoround" --model "$model/m" --iters 4 --nsamples 4 --seqlen 64 --output_dir "$model/q"
grep -h "isa: avx2;" /tmp/ar_emulated.$$ > /dev/null || { echo "  FAIL  the CLI did not run at avx2 on EPYC-Milan"; fail=1; }
echo "== x86-64-v2 build on Nehalem (SSE4.2, no AVX)"
for t in test_isa test_exp test_qdq test_ops_ref_fd; do run Nehalem "$v2/tests/$t" --gtest_brief=1 $filter; done
echo "== x86-64-v3 CLI on Nehalem: refused"
if qemu-x86_64 -cpu Nehalem "$build/src/cli/autoround" --version > /tmp/ar_emulated.$$ 2>&1; then
  echo "  FAIL  it started"; fail=1
elif grep -q "targets x86-64-v3.*lacks avx2" /tmp/ar_emulated.$$; then
  echo "  ok    $(cat /tmp/ar_emulated.$$)"
else
  echo "  FAIL  unexpected output:"; cat /tmp/ar_emulated.$$; fail=1
fi
exit $fail
