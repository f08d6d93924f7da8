#!/usr/bin/env bash
# Checks that torchrun launches autoround ranks (`torchrun --no-python`), as users of PyTorch's launcher
# would: 2 processes on this host write the same bytes as a single-process run of a generated model.
# Needs a venv outside the repo with torch (torchrun is in its bin/):
#   python3 -m venv /work/arvenv && /work/arvenv/bin/pip install torch
#   tools/check_torchrun.sh [BUILD_DIR] [VENV]
set -euo pipefail
BUILD=${1:-build}
VENV=${2:-/work/arvenv}
CLI=$(realpath "$BUILD/src/cli/autoround")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BUILD/bench/stream_bench" --write "$WORK/model" --layers 2 --hidden 256 --inter 512 --heads 4 --kv_heads 2 \
  --vocab 1000 > /dev/null
ARGS=(--model "$WORK/model" --iters 10 --nsamples 8 --seqlen 128 --threads 1)
"$CLI" "${ARGS[@]}" --output_dir "$WORK/serial" 2> "$WORK/serial.log"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$VENV/bin/torchrun" --no-python --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$PORT" \
  "$CLI" "${ARGS[@]}" --output_dir "$WORK/job" > "$WORK/torchrun.log" 2>&1 || { cat "$WORK/torchrun.log"; exit 1; }
grep -m1 "torchrun: rank 0 of 2" "$WORK/torchrun.log"
grep -m1 "handshake" "$WORK/torchrun.log"
if diff -r "$WORK/serial" "$WORK/job" > /dev/null; then
  echo "check_torchrun: OK: torchrun --no-python --nproc_per_node 2 wrote the single-process run's bytes"
else
  echo "check_torchrun: FAILED: the torchrun job's output differs from the single-process run"; exit 1
fi
