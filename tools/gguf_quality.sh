#!/usr/bin/env bash
# GGUF quality table (docs/gguf.md): KL divergence against the FP model on held-out text, measured by
# llama.cpp's own llama-perplexity (--kl-divergence), for our files and llama-quantize's at the same
# presets, from the same model and the same calibration text.
#   tools/gguf_quality.sh LLAMA_CPP_BIN_DIR AUTOROUND_BIN HF_MODEL_DIR CALIB.txt HELDOUT.txt "q4_k_m q2_k_s" [ITERS] [CTX]
# llama.cpp is built outside this repository (e.g. the copy vendored in llama-cpp-python's sdist):
#   cmake -S llama.cpp -B build && cmake --build build --target llama-perplexity llama-quantize llama-imatrix
set -euo pipefail
B=$1; AR=$2; M=$3; CALIB=$4; HELD=$5; PRESETS=$6; ITERS=${7:-200}; CTX=${8:-128}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
"$AR" --model "$M" --format gguf:f16 --iters 0 --output_dir "$W/f16" 2>/dev/null
FP=$(ls "$W"/f16/*.gguf)
"$B/llama-perplexity" -m "$FP" -f "$HELD" -c "$CTX" -b "$CTX" --kl-divergence-base "$W/base.kld" > "$W/base.log" 2>&1
"$B/llama-imatrix" -m "$FP" -f "$CALIB" -o "$W/imatrix.gguf" -c "$CTX" > "$W/imatrix.log" 2>&1
kld() {  # mean KLD and top-1 agreement of a GGUF against the FP logits
  "$B/llama-perplexity" -m "$1" -f "$HELD" -c "$CTX" -b "$CTX" --kl-divergence-base "$W/base.kld" --kl-divergence \
    > "$W/k.log" 2>&1
  local mean top ppl
  mean=$(grep -E "^Mean +KLD:" "$W/k.log" | awk '{print $3}')
  top=$(grep -E "^Same top p:" "$W/k.log" | awk '{print $4}')
  ppl=$(grep -E "^Mean PPL\(Q\) " "$W/k.log" | awk '{print $4}')
  printf "%s | %s | %s | %s" "$(stat -c %s "$1")" "$mean" "$top" "$ppl"
}
echo "| preset | method | file bytes | mean KLD | same top-1 % | PPL(Q) |"
echo "|---|---|---|---|---|---|"
for p in $PRESETS; do
  P=$(echo "$p" | tr a-z A-Z)
  "$B/llama-quantize" "$FP" "$W/lq.gguf" "$P" > /dev/null 2>&1
  echo "| $p | llama-quantize | $(kld "$W/lq.gguf") |"
  "$B/llama-quantize" --imatrix "$W/imatrix.gguf" "$FP" "$W/lqi.gguf" "$P" > /dev/null 2>&1
  echo "| $p | llama-quantize + llama-imatrix | $(kld "$W/lqi.gguf") |"
  "$AR" --model "$M" --format "gguf:$p" --iters 0 --dataset "$CALIB" --output_dir "$W/rtn" --overwrite 2>/dev/null
  echo "| $p | autoround.cpp --iters 0 | $(kld "$(ls "$W"/rtn/*.gguf)") |"
  "$AR" --model "$M" --format "gguf:$p" --iters "$ITERS" --dataset "$CALIB" --output_dir "$W/sr" --overwrite 2>/dev/null
  echo "| $p | autoround.cpp SignRound ($ITERS iters) | $(kld "$(ls "$W"/sr/*.gguf)") |"
done
