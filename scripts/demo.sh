#!/usr/bin/env bash
# Main job on a built-in default:
#  1. a small Llama model that the project generates itself (random weights, byte tokenizer) is
#     quantized to W4G32 with RTN, optimized RTN and SignRound on the built-in calibration corpus, and
#     a table of perplexity and KL divergence against the unquantized model is printed, and the
#     SignRound run is repeated data-parallel on 2 CPU devices (byte-identical output);
#  2. with the stories260K fixture present (../shared/fixtures): convert it from llama2.c, generate,
#     measure perplexity, and compare RTN with SignRound on this real model.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
AR="$ROOT/$BUILD/src/cli/autoround"
OUT=${AR_DEMO_DIR:-$ROOT/out/demo}
FX=${AR_FIXTURES:-$ROOT/../shared/fixtures}
mkdir -p "$OUT"

# One row: method, then "ppl kl top1" parsed from eval --json.
row() {
  local name=$1 dir=$2 ref=$3 text=$4
  local j
  j=$("$AR" eval --model "$dir" --ref-model "$ref" --text "$text" --ctx 128 --json)
  printf "%-26s %10s %12s %8s\n" "$name" \
    "$(sed -E 's/.*"ppl":([^,]+).*/\1/' <<<"$j" | cut -c1-8)" \
    "$(sed -E 's/.*"kl_mean":([^,]+).*/\1/' <<<"$j" | cut -c1-10)" \
    "$(sed -E 's/.*"top1_agreement":([^,]+).*/\1/' <<<"$j" | cut -c1-6)"
}

quantize_table() {
  local model=$1 text=$2 tag=$3
  printf "%-26s %10s %12s %8s\n" method ppl kl_vs_fp top1
  row "fp (reference)" "$model" "$model" "$text"
  "$AR" --model "$model" --bits 4 --group_size 32 --iters 0 --disable_opt_rtn --nsamples 16 --seqlen 128 \
    --output_dir "$OUT/$tag-rtn" --overwrite 2>/dev/null
  row "W4G32 RTN" "$OUT/$tag-rtn" "$model" "$text"
  "$AR" --model "$model" --bits 4 --group_size 32 --iters 0 --nsamples 16 --seqlen 128 \
    --output_dir "$OUT/$tag-optrtn" --overwrite 2>/dev/null
  row "W4G32 opt-RTN" "$OUT/$tag-optrtn" "$model" "$text"
  local t0 t1
  t0=$(date +%s%N)
  "$AR" --model "$model" --bits 4 --group_size 32 --iters 100 --nsamples 16 --seqlen 128 \
    --output_dir "$OUT/$tag-signround" --overwrite 2>/dev/null
  t1=$(date +%s%N)
  SERIAL_MS=$(( (t1 - t0) / 1000000 ))
  row "W4G32 SignRound (100 it.)" "$OUT/$tag-signround" "$model" "$text"
}

echo "== a generated model (4 layers, hidden 256, random weights, byte tokenizer)"
"$ROOT/$BUILD/bench/stream_bench" --write "$OUT/generated" --layers 4 --hidden 256 --inter 512 --vocab 300 >/dev/null
cat "$ROOT/docs/ARCHITECTURE.md" "$ROOT/README.md" > "$OUT/eval_text.txt"  # text not used for calibration
quantize_table "$OUT/generated" "$OUT/eval_text.txt" generated
echo "== the same SignRound run, data-parallel on 2 CPU devices (one replica each, cores split)"
t0=$(date +%s%N)
"$AR" --model "$OUT/generated" --bits 4 --group_size 32 --iters 100 --nsamples 16 --seqlen 128 \
  --parallel_quantization 2 --devices cpu:0,cpu:1 --output_dir "$OUT/generated-signround-w2" --overwrite 2>/dev/null
t1=$(date +%s%N)
if cmp -s "$OUT/generated-signround/model.safetensors" "$OUT/generated-signround-w2/model.safetensors"; then
  echo "serial: $SERIAL_MS ms; world 2: $(( (t1 - t0) / 1000000 )) ms; model.safetensors byte-identical"
else
  echo "world 2: output DIFFERS from the serial run"; exit 1
fi

if [[ -f "$FX/stories260K/stories260K.bin" ]]; then
  echo
  echo "== stories260K (llama2.c) -> HF directory $OUT/stories260K"
  "$AR" convert --llama2c "$FX/stories260K/stories260K.bin" --tokenizer "$FX/stories260K/tok512.bin" \
    --out "$OUT/stories260K" --overwrite
  echo "== generate (greedy, 60 tokens after the prompt)"
  "$AR" generate --model "$OUT/stories260K" --prompt "Once upon a time" -n 60
  head -c 200000 "$FX/text/tinystories/tinystories_sample.txt" > "$OUT/tinystories_200k.txt"
  echo "== quantize stories260K; evaluate on the first 200 kB of TinyStories"
  quantize_table "$OUT/stories260K" "$OUT/tinystories_200k.txt" stories260K
else
  echo "(fixtures not found at $FX: the stories260K part is skipped)"
fi
