#!/usr/bin/env bash
# Shows the in-block progress line as a terminal user sees it (issue 11): runs `autoround` in a detached
# tmux pane (a real TTY), captures the pane twice a few seconds apart mid-block with `tmux
# capture-pane`, and prints both captures: the same line, updated in place (iteration, current and best
# loss, block and run ETA). Not part of the test suite (needs tmux).
#
#   tools/capture_progress_tty.sh [BUILD_DIR] [MODEL_DIR]
# Without MODEL_DIR a model is generated (bench/stream_bench: 2 layers, hidden 512) into a temp dir.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
AR="$ROOT/$BUILD/src/cli/autoround"
WORK=$(mktemp -d /tmp/ar_tty.XXXXXX)
trap 'tmux kill-session -t ar_tty 2>/dev/null || true; rm -rf "$WORK"' EXIT
MODEL=${2:-}
if [[ -z "$MODEL" ]]; then
  MODEL="$WORK/model"
  "$ROOT/$BUILD/bench/stream_bench" --write "$MODEL" --layers 2 --hidden 512 --inter 1024 --vocab 300 >/dev/null
fi
tmux new-session -d -s ar_tty -x 160 -y 30 \
  "'$AR' --model '$MODEL' --iters 200 --nsamples 32 --seqlen 512 --output_dir '$WORK/out'; sleep 30"
capture() { tmux capture-pane -p -t ar_tty | sed -e '/^$/d'; }
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do  # wait for the first iteration line
  sleep 1
  capture | grep -q 'iter ' && break
done
echo "---- capture 1 ($(date +%T))"
capture
sleep 4
echo "---- capture 2 ($(date +%T)): the last line was rewritten in place, not appended"
capture
