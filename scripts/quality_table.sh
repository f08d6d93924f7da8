#!/usr/bin/env bash
# Quality of RTN vs SignRound on the converted stories260K: KL divergence and perplexity against the
# FP model on TinyStories text that is not used for calibration. Prints a Markdown table.
#   scripts/quality_table.sh [BUILD] [ITERS]
# Environment: AR_BIN (the autoround binary, default BUILD/src/cli/autoround), AR_EXTRA (more quantize flags, e.g. "--amp false"), AR_SEED (sampling seed, default 42),
# AR_BITS (default "4 3 2"), AR_METHODS (default "rtn opt-rtn signround").
set -euo pipefail
BUILD=${1:-build}; ITERS=${2:-200}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
AR="${AR_BIN:-$ROOT/$BUILD/src/cli/autoround}"
FX=${AR_FIXTURES:-$ROOT/../shared/fixtures}
W=${AR_WORK:-$(mktemp -d)}
TS="$FX/text/tinystories/tinystories_sample.txt"
head -c 300000 "$TS" > "$W/calib.txt"                       # calibration: first 300 kB
dd if="$TS" of="$W/eval.txt" bs=1000 skip=1000 count=200 status=none  # evaluation: bytes 1.0-1.2 MB
"$AR" convert --llama2c "$FX/stories260K/stories260K.bin" --tokenizer "$FX/stories260K/tok512.bin" --out "$W/fp" --overwrite 2>/dev/null
FP_PPL=$("$AR" eval --model "$W/fp" --text "$W/eval.txt" --ctx 256 --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["ppl"],4))')
echo "| format | method | KL mean | KL p99 | top-1 | ppl (fp $FP_PPL) |"
echo "|---|---|---|---|---|---|"
for bits in ${AR_BITS:-4 3 2}; do
  fmt=auto_round
  for method in ${AR_METHODS:-rtn opt-rtn signround}; do
    case $method in
      rtn) iters=0; extra=--disable_opt_rtn; name="W${bits}G32 RTN" ;;
      opt-rtn) iters=0; extra=; name="W${bits}G32 opt-RTN" ;;
      signround) iters=$ITERS; extra=; name="W${bits}G32 SignRound ($ITERS iters)" ;;
    esac
    "$AR" --model "$W/fp" --bits $bits --group_size 32 --iters $iters --nsamples 64 --seqlen 256 $extra ${AR_EXTRA:-} --seed ${AR_SEED:-42} \
      --dataset "$W/calib.txt:concat=true" --format $fmt --output_dir "$W/q" --overwrite 2>/dev/null
    "$AR" eval --model "$W/q" --ref-model "$W/fp" --text "$W/eval.txt" --ctx 256 --json |
      python3 -c "import json,sys; r=json.load(sys.stdin); print('| $fmt | $name | %.5f | %.5f | %.4f | %.4f |' % (r['kl_mean'], r['kl_p99'], r['top1_agreement'], r['ppl']))"
  done
done
