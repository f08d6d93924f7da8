#!/usr/bin/env bash
# One command for a GPU machine (docs/cuda.md): builds the CUDA backend, runs its tests and cuda_bench,
# and writes a JSON summary with the logs to $OUT (default ./gpu-check-out).
#
#   scripts/gpu-check.sh               on the GPU machine
#   scripts/gpu-check.sh --fetch-deps  here, beforehand: downloads the Debian packages the build needs
#                                      beyond nvcc and CMake (GoogleTest) into .gpu-deps/, for a machine
#                                      that cannot reach a package archive (carry .gpu-deps with the tree)
#
# The build is the CUDA-only configuration (AR_CUDA_ONLY: core, kernels/cuda, test_cuda, cuda_bench), for
# sm_90 unless CUDA_ARCH says otherwise, with warnings as errors. Exit status: 0 when every step passed.
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
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
prefix=()
if [[ -d $DEPS ]] && ! [[ -e /usr/lib/x86_64-linux-gnu/cmake/GTest ]]; then
  mkdir -p /tmp/gpu-deps && for f in "$DEPS"/*.deb; do dpkg -x "$f" /tmp/gpu-deps; done
  prefix=(-DCMAKE_PREFIX_PATH=/tmp/gpu-deps/usr)
fi
step configure cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAR_CUDA_ONLY=ON -DAR_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "${prefix[@]}"
step build cmake --build "$BUILD" -j "$(nproc)" --target test_cuda cuda_bench
step test_cuda "$BUILD/tests/test_cuda" --gtest_output="json:$OUT/test_cuda.json"
step cuda_bench "$BUILD/bench/cuda_bench" --json "$OUT/cuda_bench.json"
skipped=$(grep -c "SKIPPED \]" "$OUT/test_cuda.log" 2>/dev/null || true)
(( ${skipped:-0} > 0 )) && status=1  # on a GPU machine nothing may skip
{
  echo "{"
  echo "  \"gpu\": \"$(head -1 "$OUT/gpu.txt" | tr -d '"')\","
  echo "  \"seconds\": $(( $(date +%s) - start )),"
  echo "  \"steps\": {$(IFS=,; echo "${steps[*]}")},"
  echo "  \"test_cuda_skipped_lines\": ${skipped:-0},"
  echo "  \"bench\": $(cat "$OUT/cuda_bench.json" 2>/dev/null || echo null),"
  echo "  \"not_yet_built\": [\"BlockTuner on cuda devices (attention, RMSNorm, RoPE, SwiGLU, loss kernels)\","
  echo "    \"tune_bench on the GPU\", \"end-to-end quantization on the GPU\", \"--devices cuda:N lanes and NCCL\"]"
  echo "}"
} > "$OUT/summary.json"
cat "$OUT/summary.json"
exit $status
