#!/usr/bin/env bash
# Installs the Debian packages trainlab builds against, and only those that are missing.
# Idempotent: when everything is present it does nothing (no apt-get update, no root needed).
set -euo pipefail

# The lists live in scripts/packages.sh (shared with fetch-device-debs.sh): what the build finds, and
# this machine's tools, the PyTorch peer and qemu-user.
source "$(dirname "$0")/packages.sh"
packages=("${TRAINLAB_BUILD_PACKAGES[@]}" "${TRAINLAB_HOST_PACKAGES[@]}")

# `make test-sanitize` and `make fuzz` (libFuzzer) also need clang, its sanitizer runtimes and its
# OpenMP; nothing else does.
if [ "${1:-}" = "--sanitize" ]; then
  packages+=(clang-14 libclang-rt-14-dev libomp-14-dev)
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing missing Debian packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
