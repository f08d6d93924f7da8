#!/usr/bin/env bash
# Main job on a built-in default. With the stories260K fixture present (../shared/fixtures), converts
# it from llama2.c to an HF directory, generates greedily and measures perplexity on TinyStories.
# Without fixtures, writes a small random-weight model and runs the same commands on it.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
AR="$ROOT/$BUILD/src/cli/autoround"
OUT=${AR_DEMO_DIR:-$ROOT/out/demo}
FX=${AR_FIXTURES:-$ROOT/../shared/fixtures}
mkdir -p "$OUT"
if [[ -f "$FX/stories260K/stories260K.bin" ]]; then
  echo "== convert stories260K (llama2.c) -> HF directory $OUT/stories260K"
  "$AR" convert --llama2c "$FX/stories260K/stories260K.bin" --tokenizer "$FX/stories260K/tok512.bin" \
    --out "$OUT/stories260K" --overwrite
  echo "== generate (greedy, 60 tokens after the prompt)"
  "$AR" generate --model "$OUT/stories260K" --prompt "Once upon a time" -n 60
  echo "== perplexity on the first 200 kB of TinyStories"
  head -c 200000 "$FX/text/tinystories/tinystories_sample.txt" > "$OUT/tinystories_200k.txt"
  "$AR" eval --model "$OUT/stories260K" --text "$OUT/tinystories_200k.txt" --ctx 256
  echo "== quantize W4G32 with RTN and with SignRound (built-in calibration corpus), KL vs the FP model"
  for iters in 0 100; do
    "$AR" --model "$OUT/stories260K" --bits 4 --group_size 32 --iters $iters --nsamples 16 --seqlen 128 \
      --output_dir "$OUT/w4g32_iters$iters" --overwrite 2>/dev/null
    if [[ $iters == 0 ]]; then echo "-- RTN:"; else echo "-- SignRound, $iters iterations:"; fi
    "$AR" eval --model "$OUT/w4g32_iters$iters" --ref-model "$OUT/stories260K" --text "$OUT/tinystories_200k.txt" \
      --ctx 256
  done
else
  echo "fixtures not found at $FX: using a random-weight model (output text is noise by construction)"
  "$ROOT/$BUILD/bench/stream_bench" --write "$OUT/random" --layers 2 --hidden 256 --inter 512 --vocab 300 >/dev/null
  "$AR" generate --model "$OUT/random" --prompt "hello" -n 16
  head -c 20000 /dev/urandom | base64 > "$OUT/random.txt"
  "$AR" eval --model "$OUT/random" --text "$OUT/random.txt" --ctx 128
fi
