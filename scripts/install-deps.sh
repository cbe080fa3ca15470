#!/usr/bin/env bash
# Installs the Debian packages trainlab builds against, and only those that are missing.
# Idempotent: when everything is present it does nothing (no apt-get update, no root needed).
set -euo pipefail

# python3-torch (PyTorch 1.13 under /usr/bin/python3): the peer for side-by-side benchmarks and
# the gradient comparison test.
# libturbojpeg0-dev, libpng-dev: the image codecs of data sets on disk (trainlab make-dataset).
# ocl-icd-opencl-dev and opencl-headers: Debian's dnnl CMake config requires OpenCL (its GPU runtime).
# qemu-user: runs a build on an emulated AVX2 CPU without AVX-512 (tests/avx2_cpu_test.sh).
packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers
  libopenmpi-dev openmpi-bin
  catch2 libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libbenchmark-dev hwloc libhwloc-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev
  python3-torch python3-numpy
  qemu-user
)

# `make fuzz` (libFuzzer) also needs clang and its runtime libraries; nothing else does.
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-14 libclang-rt-14-dev)
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
