#!/usr/bin/env bash
# check_wheel_fresh_debian.sh WHEEL [ROOT]
#
# Proves that an autoround_cpp wheel works on a fresh Debian 12 (bookworm) that holds only the
# runtime libraries from Debian packages listed in RUNTIME_PKGS below (plus python3 and
# python3-venv): nothing from the build host (no compiler, no -dev packages, no host libraries,
# no other pip packages) is visible. In a minbase debootstrap root (chroot) it
#   - pip-installs the wheel into a fresh venv (--no-index: the package has no dependencies),
#   - runs `autoround --version` and checks `ldd` of the extension and the CLI shows no "not found",
#   - quantizes the stories260K fixture (converted to an HF directory) from Python
#     (AutoRound(..., scheme="W4A16", iters=2, nsamples=2, seqlen=32).quantize_and_save(format="auto_round")),
#   - evaluates the quantized output with `autoround eval` on a piece of WikiText-2 test text.
# Prints the wheel size, the installed runtime packages (with installed sizes) and, last,
# "fresh-debian wheel check: OK". Exits non-zero with a message on any failure.
#
# Time (2 cores, good network): first run about 45 seconds to 2 minutes (debootstrap + apt,
# ~60 MB of downloads); a rerun that reuses ROOT about 5-10 seconds. Needs root (debootstrap, chroot, mount) and network for the
# first run. ROOT (default /tmp/fresh-debian) is kept for reuse; it is rebuilt from scratch when
# RUNTIME_PKGS changes, so a reused root never holds packages an earlier list asked for.
#
# Environment: AR_FIXTURES (default ../../shared/fixtures beside this repository, or
# /work/shared/fixtures), AR_HOST_CLI (an autoround executable on this host to convert the model
# with; default /tmp/ci/p/build/venv-py/bin/autoround; if absent, the wheel's own CLI converts it
# inside the root), DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

# The Debian runtime packages the wheel's extension (_core.*.so) and its CLI (the native
# `autoround` executable in the wheel's scripts) need: the packages owning each DT_NEEDED library
# (ldd of the .so in the wheel + dpkg -S on the build host). Their own dependencies (libhiredis0.14,
# libibverbs1, libnl-3-200, libnl-route-3-200 for gloo; ocl-icd-libopencl1 for dnnl; libgfortran5,
# libquadmath0 for OpenBLAS) come through apt. These are the libraries the README must name.
#   libgloo0              libgloo.so.0        (distributed backend)
#   libdnnl2              libdnnl.so.2        (oneDNN)
#   libopenblas0-pthread  libopenblas.so.0    (BLAS; libopenblas0 would pick a variant)
#   libssl3               libcrypto.so.3
#   libutf8proc2          libutf8proc.so.2
#   libpcre2-8-0          libpcre2-8.so.0
#   libgomp1              libgomp.so.1        (OpenMP)
#   libstdc++6 libgcc-s1 libc6                (C++/C runtime; already in any Debian)
RUNTIME_PKGS="libgloo0 libdnnl2 libopenblas0-pthread libssl3 libutf8proc2 libpcre2-8-0 libgomp1 libstdc++6 libgcc-s1 libc6"
BASE_PKGS="python3 python3-venv"

SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
MARK_BOOT=.check-wheel-debootstrap-done   # in ROOT: debootstrap finished
MARK_PKGS=.check-wheel-pkgs               # in ROOT: the package lists installed (BASE_PKGS, RUNTIME_PKGS)
MARK_OWN=.check-wheel-root                # in ROOT: made by this script (safe to wipe)

die() { echo "check_wheel_fresh_debian: FAILED: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }

[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 WHEEL [ROOT]" >&2; exit 2; }
WHEEL=$(readlink -f "$1")
ROOT=${2:-/tmp/fresh-debian}
[[ -f $WHEEL ]] || die "wheel $1 not found"
WHEEL_NAME=$(basename "$WHEEL")
[[ $WHEEL_NAME == autoround_cpp-*.whl ]] || die "$WHEEL_NAME is not an autoround_cpp wheel file name"
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
ROOT=$(readlink -m "$ROOT")
[[ $ROOT != / && -n $ROOT ]] || die "ROOT must not be /"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FIX=${AR_FIXTURES:-}
if [[ -z $FIX ]]; then
  for d in "$HERE/../../shared/fixtures" /work/shared/fixtures; do
    [[ -f $d/stories260K/stories260K.bin ]] && { FIX=$(readlink -f "$d"); break; }
  done
fi
[[ -n $FIX && -f $FIX/stories260K/stories260K.bin && -f $FIX/stories260K/tok512.bin ]] ||
  die "fixtures (stories260K) not found; set AR_FIXTURES"
TEXT_SRC=$FIX/text/wikitext-2-raw/wiki.test.raw
[[ -f $TEXT_SRC ]] || die "$TEXT_SRC not found"
HOST_CLI=${AR_HOST_CLI:-/tmp/ci/p/build/venv-py/bin/autoround}

TMP=$(mktemp -d /tmp/check-wheel.XXXXXX)
cleanup() {
  local rc=$?
  if mountpoint -q "$ROOT/proc" 2>/dev/null; then umount "$ROOT/proc" || umount -l "$ROOT/proc" || true; fi
  rm -rf "$TMP"
  [[ $rc -eq 0 ]] || echo "check_wheel_fresh_debian: FAILED (exit $rc); see the output above" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Inside the root with a clean environment (nothing of the host's PATH, LD_LIBRARY_PATH, PYTHONPATH).
# nice_in_root: the same at the lowest CPU priority (for the CPU-heavy steps).
CHROOT=$(command -v chroot) || die "chroot not found"
in_root() {
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$CHROOT" "$ROOT" "$@"
}
nice_in_root() { nice -n 19 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  DEBIAN_FRONTEND=noninteractive "$CHROOT" "$ROOT" "$@"; }

t0=$(date +%s)
WANT_PKGS="base=$BASE_PKGS runtime=$RUNTIME_PKGS"

# ---- the root: reuse a finished one with the same package lists, else build it from scratch ----
if [[ -e $ROOT ]] && [[ -n $(ls -A "$ROOT" 2>/dev/null) ]]; then
  if [[ -f $ROOT/$MARK_BOOT && -f $ROOT/$MARK_PKGS && $(cat "$ROOT/$MARK_PKGS") == "$WANT_PKGS" ]]; then
    REUSE=1
  elif [[ -f $ROOT/$MARK_OWN ]]; then
    echo "ROOT $ROOT is unfinished or was made for other packages: rebuilding it"
    mountpoint -q "$ROOT/proc" && umount "$ROOT/proc"
    rm -rf --one-file-system "$ROOT"
    REUSE=0
  else
    die "$ROOT exists, is not empty and was not made by this script; remove it or pass another ROOT"
  fi
else
  REUSE=0
fi

if [[ $REUSE == 0 ]]; then
  if ! command -v debootstrap >/dev/null; then
    step "installing debootstrap on the host"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
      die "apt-get install debootstrap"
  fi
  step "debootstrap --variant=minbase $SUITE $ROOT $MIRROR"
  mkdir -p "$ROOT"
  touch "$ROOT/$MARK_OWN"
  nice -n 19 debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" > "$TMP/debootstrap.log" 2>&1 ||
    { tail -30 "$TMP/debootstrap.log" >&2; die "debootstrap"; }
  touch "$ROOT/$MARK_BOOT"
fi

mount -t proc proc "$ROOT/proc"

if [[ $REUSE == 0 ]]; then
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
  step "apt-get install $BASE_PKGS (in the root)"
  in_root apt-get update -qq || die "apt-get update in the root"
  in_root dpkg-query -W -f='${Package}\n' | sort > "$ROOT/.check-wheel-pkgs-minbase"
  nice_in_root apt-get install -y -qq --no-install-recommends $BASE_PKGS > "$TMP/apt1.log" 2>&1 ||
    { tail -30 "$TMP/apt1.log" >&2; die "apt-get install $BASE_PKGS"; }
  in_root dpkg-query -W -f='${Package}\n' | sort > "$ROOT/.check-wheel-pkgs-python"
  step "apt-get install the runtime libraries (in the root): $RUNTIME_PKGS"
  nice_in_root apt-get install -y -qq --no-install-recommends $RUNTIME_PKGS > "$TMP/apt2.log" 2>&1 ||
    { tail -30 "$TMP/apt2.log" >&2; die "apt-get install $RUNTIME_PKGS"; }
  in_root dpkg-query -W -f='${Package}\n' | sort > "$ROOT/.check-wheel-pkgs-runtime"
  in_root apt-get clean
  printf '%s' "$WANT_PKGS" > "$ROOT/$MARK_PKGS"
else
  step "reusing the root $ROOT (made $(date -r "$ROOT/$MARK_BOOT" '+%F %T'))"
fi

# every listed package must be installed, whatever the root's history
for p in $BASE_PKGS $RUNTIME_PKGS; do
  in_root dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    die "package $p is not installed in $ROOT"
done

step "installed runtime packages (listed, and pulled in by them): name version installed-size KiB"
ADDED=$(comm -13 "$ROOT/.check-wheel-pkgs-python" "$ROOT/.check-wheel-pkgs-runtime")
total=0
for p in $(printf '%s\n' $RUNTIME_PKGS $ADDED | sort -u); do
  read -r name ver size < <(in_root dpkg-query -W -f='${Package} ${Version} ${Installed-Size}\n' "$p")
  if grep -qx "$p" <<<"$ADDED"; then tag=new; total=$((total + size)); else tag="in the base already"; fi
  if [[ " $RUNTIME_PKGS " == *" $p "* ]]; then tag="$tag, listed"; else tag="$tag, dependency"; fi
  printf '  %-24s %-26s %7s  %s\n' "$name" "$ver" "$size" "$tag"
done
echo "  added by the runtime libraries: $(wc -w <<<"$ADDED") packages, $((total / 1024)) MiB installed"
echo "  the root: $(in_root dpkg-query -W -f='.\n' | wc -l) packages; no compiler: $(in_root sh -c 'command -v cc gcc c++ g++ || echo none')"

# ---- fresh venv + the wheel; nothing from earlier runs ----
step "wheel $WHEEL_NAME: $(stat -c %s "$WHEEL") bytes ($(du -h "$WHEEL" | cut -f1))"
rm -rf "$ROOT/opt/v" "$ROOT/opt/model" "$ROOT/opt/out" "$ROOT/opt/text.txt" "$ROOT"/tmp/*.whl
cp "$WHEEL" "$ROOT/tmp/$WHEEL_NAME"
in_root python3 -m venv /opt/v || die "python3 -m venv"
in_root /opt/v/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q "/tmp/$WHEEL_NAME" ||
  die "pip install the wheel"
in_root /opt/v/bin/pip list --disable-pip-version-check 2>/dev/null | sed 's/^/  /'

step "autoround --version"
in_root /opt/v/bin/autoround --version || die "autoround --version"

step "ldd of the extension and the CLI (in the root)"
EXT=$(in_root /opt/v/bin/python -c 'import glob, os, importlib.util as u; d = os.path.dirname(u.find_spec("autoround_cpp").origin); print(glob.glob(d + "/_core*.so")[0])') ||
  die "finding the extension"
for f in "$EXT" /opt/v/bin/autoround; do
  in_root ldd "$f" > "$TMP/ldd.txt" 2>&1 || { cat "$TMP/ldd.txt"; die "ldd $f"; }
  if grep -q 'not found' "$TMP/ldd.txt"; then
    grep 'not found' "$TMP/ldd.txt" >&2; die "ldd $f: libraries not found"
  fi
  echo "  $f: $(grep -c '=>' "$TMP/ldd.txt") libraries, none missing"
done
# which package gives each library of the extension (the README's list)
in_root ldd "$EXT" | awk '/=> \//{print $1, $3}' | while read -r lib path; do
  pkg=$(in_root sh -c "dpkg -S '$path' 2>/dev/null || dpkg -S \"\$(readlink -f '$path')\" 2>/dev/null" | head -1 | cut -d: -f1)
  printf '  %-24s %s\n' "$lib" "${pkg:-?}"
done

# ---- the model (stories260K as an HF directory) and the eval text ----
step "converting stories260K to an HF directory"
if [[ -x $HOST_CLI ]]; then
  nice -n 19 "$HOST_CLI" convert --llama2c "$FIX/stories260K/stories260K.bin" \
    --tokenizer "$FIX/stories260K/tok512.bin" --out "$TMP/model" > "$TMP/convert.log" 2>&1 ||
    { cat "$TMP/convert.log" >&2; die "convert (host CLI $HOST_CLI)"; }
  cp -a "$TMP/model" "$ROOT/opt/model"
  echo "  with the host CLI $HOST_CLI; copied to /opt/model"
else
  mkdir -p "$ROOT/tmp/stories260K"
  cp "$FIX/stories260K/stories260K.bin" "$FIX/stories260K/tok512.bin" "$ROOT/tmp/stories260K/"
  in_root /opt/v/bin/autoround convert --llama2c /tmp/stories260K/stories260K.bin \
    --tokenizer /tmp/stories260K/tok512.bin --out /opt/model > "$TMP/convert.log" 2>&1 ||
    { cat "$TMP/convert.log" >&2; die "convert (the wheel's CLI)"; }
  echo "  with the wheel's CLI in the root (no host CLI at $HOST_CLI)"
fi
# about 16 KiB of WikiText-2 test text, cut at a line end
head -c 16384 "$TEXT_SRC" | sed '$d' > "$ROOT/opt/text.txt"
echo "  eval text: $(wc -c < "$ROOT/opt/text.txt") bytes of $(basename "$TEXT_SRC")"

step "quantize from Python (W4A16, iters=2, nsamples=2, seqlen=32)"
cat > "$ROOT/tmp/quantize.py" <<'EOF'
import autoround_cpp
from autoround_cpp import AutoRound
print("autoround_cpp from", autoround_cpp.__file__)
ar = AutoRound("/opt/model", scheme="W4A16", iters=2, nsamples=2, seqlen=32)
ar.quantize_and_save(output_dir="/opt/out", format="auto_round")
EOF
nice_in_root /opt/v/bin/python /tmp/quantize.py \
  > "$TMP/quantize.log" 2>&1 || { tail -40 "$TMP/quantize.log" >&2; die "quantize_and_save"; }
tail -5 "$TMP/quantize.log" | sed 's/^/  /'
[[ -f $ROOT/opt/out/config.json ]] || die "no /opt/out/config.json after quantize_and_save"
grep -q quantization_config "$ROOT/opt/out/config.json" || die "/opt/out/config.json has no quantization_config"
echo "  /opt/out: $(ls "$ROOT/opt/out" | tr '\n' ' ')"

step "autoround eval --model /opt/out --text /opt/text.txt"
nice_in_root /opt/v/bin/autoround eval --model /opt/out --text /opt/text.txt > "$TMP/eval.log" 2>&1 ||
  { tail -40 "$TMP/eval.log" >&2; die "autoround eval"; }
tail -5 "$TMP/eval.log" | sed 's/^/  /'
grep -qi 'ppl\|perplexity' "$TMP/eval.log" || die "autoround eval printed no perplexity"

echo
echo "wall time: $(( $(date +%s) - t0 )) s ($([[ $REUSE == 1 ]] && echo "reused root" || echo "new root"))"
echo "fresh-debian wheel check: OK"
