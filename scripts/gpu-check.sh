#!/usr/bin/env bash
# One command for a GPU machine (docs/cuda.md): the CUDA tests, the benches and end-to-end runs on the GPU
# against the CPU's, with a summary.json and the logs (8 files at most) in $OUT (default ./gpu-check-out).
#
#   scripts/gpu-check.sh --pack [BUILD]  here, beforehand: builds the GPU targets in BUILD (default build) and
#                                        puts them, the shared libraries they need beyond the C/C++ runtime and
#                                        CUDA (compressed), GoogleTest's .deb and the stories260K fixture in
#                                        .gpu-pack/ (git-ignored; name it in the device call's carry)
#   scripts/gpu-check.sh                 on the GPU machine: runs the packed binaries when they load there,
#                                        else builds the CUDA-only configuration (AR_CUDA_ONLY, sm_90) and
#                                        runs its tests and bench only
#
# Every step has a time limit (STEP_LIMIT_S, default 150 s). CPU_E2E=0 skips the end-to-end runs' CPU half
# (their bits do not depend on the GPU code: a rerun after a GPU fix need not repeat them). E2E_8B=N adds
# the issue's end-to-end target on the GPU only: a generated model of N Llama-3-8B-shaped blocks (hidden
# 4096, intermediate 14336, 32/8 heads, vocab 32000) at AutoRound's defaults (W4G128, 200 iterations,
# 128 x 2048), with its own time limit E2E_8B_LIMIT_S (default 420 s); its log has the per-block times.
# AR_COMPARE=N runs AutoRound 0.16.1 and our tool on the same GPU, model (N Llama-3-8B-shaped blocks) and
# calibration ids at AutoRound's defaults (tools/gpu_vs_autoround.py: wall, peak device memory, KL of both
# outputs), with its own limit AR_COMPARE_LIMIT_S (default 540 s); auto-round and the packages the GPU image
# lacks come from the pack's wheels (COMPARE_DEVICE=cpu and COMPARE_ARGS="--hidden 256 ..." check the wiring on
# a machine without a GPU). CHECKS=0 skips the tests, benches and end-to-end runs (a call of the
# comparison alone).
# Exit status: 0 when every step passed and no test skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.gpu-pack
BINS=(test_cuda test_signround_cuda test_cuda_float_qdq cuda_bench tune_bench_cuda autoround stream_bench)

pack() {
  local build=${1:-build} fx=${AR_FIXTURES:-../shared/fixtures}
  cmake --build "$build" -j "$(nproc)" --target "${BINS[@]}" || return 1
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/debs" "$PACK/fixtures"
  local b f
  for b in "${BINS[@]}"; do
    f=$(find "$build" -type f -name "$b" -perm -u+x | head -1)
    [[ -n $f ]] || { echo "pack: $b not built in $build" >&2; return 1; }
    strip -o "$PACK/bin/$b" "$f"
  done
  # Libraries the binaries need, except the C/C++ runtime (the GPU machine has a newer one) and CUDA's
  # (its own toolkit's, matching its driver).
  ldd "$PACK"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    grep -vE '^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^ ]*|libcudart|libcublas[^ ]*)\.so' |
    while read -r name path; do cp -L "$path" "$PACK/lib/$name"; done
  tar -C "$PACK/lib" -cJf "$PACK/lib.tar.xz" . && rm -rf "$PACK/lib"
  tar -C "$PACK/bin" -cJf "$PACK/bin.tar.xz" . && rm -rf "$PACK/bin"
  (cd "$PACK/debs" && apt-get download libgtest-dev >/dev/null 2>&1) || echo "pack: no GoogleTest .deb (fallback build only)"
  cp "$fx/stories260K/stories260K.bin" "$fx/stories260K/tok512.bin" "$PACK/fixtures/"
  head -c 200000 "$fx/text/tinystories/tinystories_sample.txt" > "$PACK/fixtures/tinystories_200k.txt"
  # The AutoRound comparison: the Llama-2 tokenizer, WikiText-2 for calibration, and the wheels of auto-round
  # and of its needs that the GPU image (Python 3.12) lacks.
  mkdir -p "$PACK/fixtures/llama2-spm" "$PACK/wheels"
  cp "$fx"/tokenizers/llama2-spm/{tokenizer.json,tokenizer.model,tokenizer_config.json,special_tokens_map.json} \
    "$PACK/fixtures/llama2-spm/"
  xz -c "$fx/text/wikitext-2-raw/wiki.test.raw" > "$PACK/fixtures/wiki.test.raw.xz"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$PACK/wheels" auto-round==0.16.1 \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 || echo "pack: no wheels (the AutoRound comparison needs auto-round there)"
  du -sh "$PACK" "$PACK"/*
  local tree=$(( $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) + $(du -sb "$PACK" | cut -f1) ))
  (( tree < 64 << 20 )) || echo "pack: the tree and the pack are $(( tree >> 20 )) MiB, over the 64 MiB a device call carries"
}
if [[ ${1:-} == --pack ]]; then pack "${2:-build}"; exit; fi

OUT=${OUT:-$PWD/gpu-check-out}
LIMIT=${STEP_LIMIT_S:-150}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
mkdir -p "$OUT" "$WORK/logs"
LOGS=$WORK/logs
start=$(date +%s)
status=0
steps=()
step() {  # step NAME CMD...: runs CMD (time-limited) with its output in $LOGS/NAME.log, records pass/fail
  local name=$1; shift
  local t0=$(date +%s) r
  if timeout -k 10 "$LIMIT" "$@" > "$LOGS/$name.log" 2>&1; then r=pass; else r="fail rc $?"; status=1; fi
  local dt=$(( $(date +%s) - t0 ))
  echo "$name: $r ($dt s)"
  steps+=("\"$name\": {\"result\": \"$r\", \"seconds\": $dt}")
  tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs  # kept current: the call's time limit may end the script
}

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
echo "gpu: ${gpu:-no nvidia-smi}; nvcc: $(nvcc --version 2>/dev/null | tail -1); cores: $(nproc)," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"


# The packed binaries, with their libraries and CUDA's from this machine's toolkit.
mode=none
if [[ -f $PACK/bin.tar.xz ]]; then
  mkdir -p "$WORK/lib" "$WORK/bin" && tar -C "$WORK/lib" -xJf "$PACK/lib.tar.xz" && tar -C "$WORK/bin" -xJf "$PACK/bin.tar.xz"
  cudadirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null
               find /usr /opt -name 'libcublasLt.so.13*' 2>/dev/null | xargs -r -n1 dirname) | sort -u | paste -sd:)
  export LD_LIBRARY_PATH="$WORK/lib:$cudadirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  missing=$(ldd "$WORK"/bin/* 2>&1 | grep "not found" | sort -u)
  if [[ -z $missing ]] && "$WORK/bin/autoround" --version > "$LOGS/version.log" 2>&1; then
    mode=packed; BIN=$WORK/bin
  else
    echo "packed binaries do not load here: ${missing:-$(cat "$LOGS/version.log")}"
  fi
fi
if [[ $mode == none ]]; then  # the CUDA-only build, with GoogleTest from the packed .deb
  BUILD=${BUILD:-build-gpu}
  prefix=()
  if ls "$PACK"/debs/*.deb > /dev/null 2>&1 && ! [[ -e /usr/lib/x86_64-linux-gnu/cmake/GTest ]]; then
    mkdir -p "$WORK/deps" && for f in "$PACK"/debs/*.deb; do dpkg -x "$f" "$WORK/deps"; done
    prefix=(-DCMAKE_PREFIX_PATH="$WORK/deps/usr")
  fi
  step configure cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAR_CUDA=ON -DAR_CUDA_ONLY=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "${prefix[@]}"
  step build cmake --build "$BUILD" -j "$(nproc)" --target test_cuda cuda_bench
  mode=cuda_only; BIN=$PWD/$BUILD/bin
  mkdir -p "$BIN" && cp "$BUILD/tests/test_cuda" "$BUILD/bench/cuda_bench" "$BIN/" 2>/dev/null
fi
echo "mode: $mode"

if [[ ${CHECKS:-1} != 0 ]]; then
  step test_cuda "$BIN/test_cuda"
  step cuda_bench "$BIN/cuda_bench" --json "$LOGS/cuda_bench.json"
fi
if [[ $mode == packed && ${CHECKS:-1} != 0 ]]; then
  step test_signround_cuda "$BIN/test_signround_cuda"
  step test_cuda_float_qdq "$BIN/test_cuda_float_qdq"
  step tune_bench_amp "$BIN/tune_bench_cuda" --iters 2 --amp 1
  # End to end: the same quantization on the CPU (this machine's cores) and on cuda:0, then both evaluated
  # against the unquantized model on text that was not used for calibration.
  AR=$BIN/autoround FX=$PACK/fixtures M=$WORK/models
  mkdir -p "$M"
  step convert "$AR" convert --llama2c "$FX/stories260K.bin" --tokenizer "$FX/tok512.bin" --out "$M/stories260K" --overwrite
  step write_generated "$BIN/stream_bench" --write "$M/generated" --layers 4 --hidden 1024 --inter 2816 --heads 16 \
    --kv_heads 4 --vocab 2000
  head -c 40000 "$FX/tinystories_200k.txt" > "$WORK/eval_40k.txt"
  e2e_run() {  # e2e_run TAG MODEL TEXT ARGS...: CPU and GPU runs, each evaluated; a JSON line each in $LOGS/e2e.jsonl
    local tag=$1 model=$2 text=$3; shift 3
    local where dev t0 t1 j wheres=(cpu gpu)
    [[ ${CPU_E2E:-1} == 0 ]] && wheres=(gpu)
    for where in "${wheres[@]}"; do
      dev=(); [[ $where == gpu ]] && dev=(--device cuda:0)
      t0=$(date +%s%N)
      step "${tag}_$where" "$AR" quantize --model "$model" "$@" "${dev[@]}" --output_dir "$M/$tag-$where" --overwrite
      t1=$(date +%s%N)
      j=$("$AR" eval --model "$M/$tag-$where" --ref-model "$model" --text "$text" --ctx 128 --json \
          2>>"$LOGS/eval.log")
      echo "{\"run\": \"${tag}_$where\", \"wall_s\": $(( (t1 - t0) / 1000000 ))e-3, \"eval\": ${j:-null}}" | tee -a "$LOGS/e2e.jsonl"
    done
  }
  e2e_run stories260K "$M/stories260K" "$FX/tinystories_200k.txt" --bits 4 --group_size 32
  e2e_run stories260K_nvfp4 "$M/stories260K" "$FX/tinystories_200k.txt" --scheme NVFP4 --act_bits 16
  step tune_bench_fp32 "$BIN/tune_bench_cuda" --iters 2
  e2e_run generated "$M/generated" "$WORK/eval_40k.txt" --bits 4 --group_size 128 --iters 50 --nsamples 32 --seqlen 512
  if [[ ${E2E_8B:-0} -gt 0 ]]; then
    step write_8b "$BIN/stream_bench" --write "$M/llama8b-$E2E_8B" --layers "$E2E_8B" --hidden 4096 --inter 14336 \
      --heads 32 --kv_heads 8 --vocab 32000
    LIMIT=${E2E_8B_LIMIT_S:-420} step e2e_8b_gpu "$AR" quantize --model "$M/llama8b-$E2E_8B" --device cuda:0 \
      --output_dir "$M/llama8b-q" --overwrite
    grep -E "block [0-9]+/[0-9]+:|total:" "$LOGS/e2e_8b_gpu.log" | tail -"$(( E2E_8B + 1 ))"
  fi
fi
if [[ $mode == packed && ${AR_COMPARE:-0} -gt 0 ]]; then
  # AutoRound from the pack's wheels where the image has none (installed beside, not over, its packages).
  if ! python3 -c "import auto_round" 2> /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
      "$PACK"/wheels/*.whl > "$LOGS/wheels.log" 2>&1 && export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  LIMIT=${AR_COMPARE_LIMIT_S:-540} step autoround_compare env PYTHONUNBUFFERED=1 python3 tools/gpu_vs_autoround.py \
    --autoround "$BIN/autoround" --fixtures "$PACK/fixtures" --work "$WORK/compare" --layers "$AR_COMPARE" \
    --device "${COMPARE_DEVICE:-cuda:0}" --json "$LOGS/compare.json" ${COMPARE_ARGS:-}
  grep -A3 "^| tool" "$LOGS/autoround_compare.log"
fi

skipped=$(cat "$LOGS"/test_*.log 2>/dev/null | grep -c "SKIPPED \]" || true)
(( ${skipped:-0} > 0 )) && status=1  # on a GPU machine nothing may skip
{
  echo "{"
  echo "  \"gpu\": \"${gpu:-no nvidia-smi}\","
  echo "  \"seconds\": $(( $(date +%s) - start )),"
  echo "  \"mode\": \"$mode\","
  echo "  \"steps\": {$(IFS=,; echo "${steps[*]}")},"
  echo "  \"skipped_tests\": ${skipped:-0},"
  echo "  \"bench\": $(cat "$LOGS/cuda_bench.json" 2>/dev/null || echo null),"
  echo "  \"tune_bench\": [$(grep -h '^{' "$LOGS"/tune_bench_*.log 2>/dev/null | paste -sd,)],"
  echo "  \"e2e\": [$(paste -sd, "$LOGS/e2e.jsonl" 2>/dev/null)],"
  echo "  \"autoround_compare\": $(cat "$LOGS/compare.json" 2>/dev/null || echo null)"
  echo "}"
} > "$OUT/summary.json"
tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs
for f in test_cuda test_signround_cuda tune_bench_amp generated_gpu e2e_8b_gpu autoround_compare; do
  [[ -f $LOGS/$f.log ]] && tail -c 2000000 "$LOGS/$f.log" > "$OUT/$f.log"
done
echo "=== failures"
grep -h -A12 "Failure\|FAILED  \]\|error:" "$LOGS"/*.log 2>/dev/null | head -80
echo "=== benches"
grep -h -v '^{' "$LOGS"/tune_bench_*.log 2>/dev/null | tail -12
cat "$LOGS/cuda_bench.log" 2>/dev/null | tail -20
echo "=== summary"
cat "$OUT/summary.json"
exit $status
