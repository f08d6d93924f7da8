#!/usr/bin/env bash
# One command for a GPU machine (docs/cuda.md): builds the CUDA backend, runs its tests and benches, and
# writes summary.json with the logs (8 files at most) to $OUT (default ./gpu-check-out).
#
#   scripts/gpu-check.sh               on the GPU machine
#   scripts/gpu-check.sh --fetch-deps  here, beforehand: downloads the Debian packages the build needs
#                                      beyond nvcc and CMake (GoogleTest) into .gpu-deps/, for a machine
#                                      that cannot reach a package archive (carry .gpu-deps with the tree)
#
# The build is the full one where this project's Debian packages are installed, else the CUDA-only
# configuration (AR_CUDA_ONLY: core, kernels/cuda, test_cuda, cuda_bench), for sm_90 unless CUDA_ARCH says
# otherwise, with warnings as errors. Exit status: 0 when every step passed and no test skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
DEPS=.gpu-deps
if [[ ${1:-} == --fetch-deps ]]; then
  mkdir -p "$DEPS" && (cd "$DEPS" && apt-get download libgtest-dev) || exit 1  # .gitignore'd
  ls -l "$DEPS"
  exit 0
fi
OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
start=$(date +%s)
status=0
step() {  # step NAME CMD...: runs CMD with its output in $OUT/NAME.log, records pass/fail
  local name=$1; shift
  local t0=$(date +%s)
  if "$@" > "$OUT/$name.log" 2>&1; then r=pass; else r=fail; status=1; fi
  echo "$name: $r ($(( $(date +%s) - t0 )) s)"
  steps+=("\"$name\": \"$r\"")
}
steps=()
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
prefix=()
if [[ -d $DEPS ]] && ! [[ -e /usr/lib/x86_64-linux-gnu/cmake/GTest ]]; then
  mkdir -p /tmp/gpu-deps && for f in "$DEPS"/*.deb; do dpkg -x "$f" /tmp/gpu-deps; done
  prefix=(-DCMAKE_PREFIX_PATH=/tmp/gpu-deps/usr)
fi
# The full build where the CPU path's packages are installed (then the tuner's test and bench run too),
# else the CUDA-only one.
common=(-DCMAKE_BUILD_TYPE=Release -DAR_WERROR=ON -DAR_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}")
if cmake -S . -B "$BUILD" "${common[@]}" -DAR_CUDA_ONLY=OFF > "$OUT/configure.log" 2>&1; then
  mode=full targets=(test_cuda cuda_bench test_signround_cuda tune_bench_cuda)
  steps+=("\"configure\": \"pass\"")
else
  rm -rf "$BUILD"
  mode=cuda_only targets=(test_cuda cuda_bench)
  step configure cmake -S . -B "$BUILD" "${common[@]}" -DAR_CUDA_ONLY=ON "${prefix[@]}"
fi
echo "build: $mode"
step build cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
step test_cuda "$BUILD/tests/test_cuda"
step cuda_bench "$BUILD/bench/cuda_bench" --json "$OUT/cuda_bench.json"
if [[ $mode == full ]]; then  # the tuner against the CPU's, then its iteration on the 8B block (logs only)
  step test_signround_cuda "$BUILD/tests/test_signround_cuda"
  step tune_bench_cuda "$BUILD/bench/tune_bench_cuda" --iters 2
fi
skipped=$(cat "$OUT"/test_*.log 2>/dev/null | grep -c "SKIPPED \]" || true)
(( ${skipped:-0} > 0 )) && status=1  # on a GPU machine nothing may skip
{
  echo "{"
  echo "  \"gpu\": \"${gpu:-no nvidia-smi}\","
  echo "  \"seconds\": $(( $(date +%s) - start )),"
  echo "  \"build\": \"$mode\","
  echo "  \"steps\": {$(IFS=,; echo "${steps[*]}")},"
  echo "  \"test_cuda_skipped_lines\": ${skipped:-0},"
  echo "  \"bench\": $(cat "$OUT/cuda_bench.json" 2>/dev/null || echo null),"
  echo "  \"not_yet_built\": [\"BlockTuner on cuda devices (BlockRunner<CudaOps> runs the block; the tuner does not)\","
  echo "    \"--amp and fast attention on the GPU\", \"tune_bench and end-to-end runs on the GPU\", \"cuda:N lanes, NCCL\"]"
  echo "}"
} > "$OUT/summary.json"
cat "$OUT/summary.json"
exit $status
