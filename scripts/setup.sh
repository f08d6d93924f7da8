#!/usr/bin/env bash
# Installs every build and test dependency of autoround.cpp from Debian's packages.
# Idempotent; run as root (or with sudo available). Used by the README and by .ci/run.
set -euo pipefail
PKGS=(build-essential cmake libssl-dev libopenblas-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
      libbenchmark-dev libdnnl-dev libgloo-dev iproute2 openmpi-bin libpcre2-dev libutf8proc-dev pkg-config time clang libclang-rt-14-dev
      qemu-user python3-dev python3-venv)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
echo "setup: dependencies present"
