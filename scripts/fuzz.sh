#!/usr/bin/env bash
# Runs every libFuzzer target of a build made with AR_FUZZ=ON for SECONDS each over its corpus:
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]      (FUZZ_JOBS targets at a time, default 1)
# Corpus dirs, in order: BUILD/fuzz/work/T (new inputs land here), BUILD/fuzz/seeds/T (from the
# shared fixtures), fuzz/corpus/T and fuzz/regressions/T (committed). Crash reproducers go to
# BUILD/fuzz/artifacts/T/; logs to BUILD/fuzz/logs/T.log. Exit status 1 if any target found something.
# FUZZ_KEEP_GOING=1 (make fuzz): libFuzzer's fork mode, which records every crash and keeps fuzzing
# for the whole time instead of stopping at the first finding.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
SECONDS_PER=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
JOBS=${FUZZ_JOBS:-1}
TARGETS=("$@")
((${#TARGETS[@]})) || mapfile -t TARGETS < "$BUILD/fuzz/targets.txt"

run_one() {
  local t=$1 bin="$BUILD/fuzz/fuzz_$1" dirs=()
  # Reproducers of an earlier run are kept aside (copy the real ones into fuzz/regressions/T/).
  if compgen -G "$BUILD/fuzz/artifacts/$t/*" > /dev/null; then
    mv "$BUILD/fuzz/artifacts/$t" "$BUILD/fuzz/artifacts/$t.$(date +%Y%m%d-%H%M%S)"
  fi
  mkdir -p "$BUILD/fuzz/work/$t" "$BUILD/fuzz/artifacts/$t" "$BUILD/fuzz/logs"
  for d in "$BUILD/fuzz/work/$t" "$BUILD/fuzz/seeds/$t" "fuzz/corpus/$t" "fuzz/regressions/$t"; do
    [[ -d $d ]] && dirs+=("$d")
  done
  local opts=(-max_total_time="$SECONDS_PER" -timeout=30 -rss_limit_mb=2560 -max_len=65536 -print_final_stats=1)
  [[ -f fuzz/dict/$t.dict ]] && opts+=(-dict="fuzz/dict/$t.dict")
  [[ ${FUZZ_KEEP_GOING:-0} == 1 ]] && opts+=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  "$bin" "${opts[@]}" -artifact_prefix="$BUILD/fuzz/artifacts/$t/" "${dirs[@]}" > "$BUILD/fuzz/logs/$t.log" 2>&1
  local rc=$?
  local stats
  stats=$(grep -E '^#[0-9]+' "$BUILD/fuzz/logs/$t.log" | tail -1 | tr -s '[:space:]' ' ')
  if ((rc)) || compgen -G "$BUILD/fuzz/artifacts/$t/*" > /dev/null; then
    echo "fuzz: $t FAILED (exit $rc): see $BUILD/fuzz/logs/$t.log and $BUILD/fuzz/artifacts/$t/"
    grep -E 'ERROR|FINDING|SUMMARY|runtime error' "$BUILD/fuzz/logs/$t.log" | head -5
    return 1
  fi
  echo "fuzz: $t ok: $stats"
}

fail=0 running=0
declare -A pids
for t in "${TARGETS[@]}"; do
  run_one "$t" & pids[$t]=$!
  running=$((running + 1))
  if ((running >= JOBS)); then wait -n || fail=1; running=$((running - 1)); fi
done
while ((running > 0)); do wait -n || fail=1; running=$((running - 1)); done
# Fork-mode jobs stopped at the time limit cannot remove their scratch directories; remove those of
# processes that are gone.
for d in /dev/shm/ar-fuzz-*; do
  [[ -d $d ]] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
done
exit $fail
