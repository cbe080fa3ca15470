#!/usr/bin/env bash
# Run HERE (a Debian machine with network) before a GPU session: downloads, without installing,
# the Debian packages trainlab builds against into .debs/ (git-ignored through .git/info/exclude),
# for scripts/device-check.sh to unpack on a GPU machine that has no apt and no network. About 16 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  libeigen3-dev libdnnl-dev libdnnl2 ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers opencl-clhpp-headers
  libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 catch2
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libhwloc15 libpmix2 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
  libpsm-infinipath1 libnuma1 libmunge2
)
grep -qx '/.debs/' .git/info/exclude 2>/dev/null || echo '/.debs/' >> .git/info/exclude
mkdir -p .debs
cd .debs
apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
echo "fetch-device-debs: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .debs/ (carry it: carry=[\".debs\"])"
