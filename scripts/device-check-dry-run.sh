#!/usr/bin/env bash
# The device check's dry run, here, without a GPU: scripts/device-check.sh through configure and
# build (DEVICE_CHECK_STOP_AFTER=build) on this machine as the bare GPU machine looks. Inside a private
# mount namespace an overlay over /usr removes every file of the packages fetch-device-debs.sh
# carries (the system's MPI, Eigen, oneDNN, ... as dpkg -L lists them; the links update-alternatives
# made, which then dangle; zlib1g stays, the system's tools need it) and cuDNN and NCCL from the
# CUDA toolkit; the two come back only as Python wheels would bring them (nvidia/cudnn and
# nvidia/nccl with the versioned libraries alone, on PYTHONPATH). Nothing outside the namespace
# changes. Needs root (unshare, mount) and .debs/ (scripts/fetch-device-debs.sh).
#
#   scripts/device-check-dry-run.sh            prints the check's stages and where cuDNN and NCCL came from
#   DRY_RUN_KEEP_BUILD=1 scripts/device-check-dry-run.sh   reuses the last dry run's build-device/
set -euo pipefail
cd "$(dirname "$0")/.."
source=$(pwd)
[ "$(id -u)" -eq 0 ] || { echo "device-check-dry-run: needs root (a mount namespace and an overlay)" >&2; exit 2; }
ls .debs/*.deb > /dev/null 2>&1 || { echo "device-check-dry-run: no .debs/: run scripts/fetch-device-debs.sh" >&2; exit 2; }
# One fixed place (the wheels' paths go into the build's flags: the same path lets a later dry run
# reuse build-device/), emptied first and removed at the end.
scratch=/tmp/trainlab-device-dry-run
rm -rf "$scratch"
mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/upper" "$scratch/work" "$scratch/out"

# The wheels, as pip lays them out: headers and the versioned libraries only (hard links: same
# file system, and they outlive the overlay's hiding of the originals).
cuda=$(readlink -f /usr/local/cuda)
wheels=$scratch/site-packages/nvidia
mkdir -p "$wheels/cudnn/lib" "$wheels/cudnn/include" "$wheels/nccl/lib" "$wheels/nccl/include"
touch "$wheels/__init__.py" "$wheels/cudnn/__init__.py" "$wheels/nccl/__init__.py"
ln "$cuda"/lib64/libcudnn*.so.9 "$wheels/cudnn/lib/" 2> /dev/null || cp "$cuda"/lib64/libcudnn*.so.9 "$wheels/cudnn/lib/"
cp "$cuda"/include/cudnn*.h "$wheels/cudnn/include/"
ln "$cuda"/lib64/libnccl.so.2 "$wheels/nccl/lib/" 2> /dev/null || cp "$cuda"/lib64/libnccl.so.2 "$wheels/nccl/lib/"
cp "$cuda"/include/nccl*.h "$wheels/nccl/include/"

source scripts/packages.sh
hidden=()
for package in "${TRAINLAB_BUILD_PACKAGES[@]}" "${TRAINLAB_DEVICE_RUNTIME_PACKAGES[@]}"; do
  [ "$package" = zlib1g ] && continue
  hidden+=("$package")
done
printf "%s\n" "${hidden[@]}" > "$scratch/hidden.txt"

unshare -m --propagation private bash -s "$source" "$scratch" "$cuda" <<'INNER'
set -euo pipefail
source=$1 scratch=$2 cuda=$3
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$scratch/upper,workdir=$scratch/work" /usr
removed=0
while read -r package; do
  while read -r path; do
    case "$path" in /usr/*) ;; *) continue ;; esac
    if [ -f "$path" ] || [ -L "$path" ]; then rm -f "$path" && removed=$((removed + 1)); fi
  done < <(dpkg -L "$package" 2> /dev/null)
done < "$scratch/hidden.txt"
# The links update-alternatives made (mpirun, mpicxx, mpi-cxx.pc, pkg-config's), dangling now.
find /usr/bin /usr/lib/x86_64-linux-gnu/pkgconfig -xtype l -delete
rm -f "$cuda"/lib64/libcudnn* "$cuda"/lib64/libnccl* "$cuda"/include/cudnn*.h "$cuda"/include/nccl*.h
echo "device-check-dry-run: hid $removed files of $(wc -l < "$scratch/hidden.txt") packages, and cuDNN and NCCL from $cuda"
for probe in mpirun mpicxx pkg-config; do
  command -v "$probe" > /dev/null && { echo "device-check-dry-run: $probe is still here"; exit 1; }
done
[ -z "$(find /usr/include/eigen3 /usr/include/oneapi -type f 2> /dev/null | head -n 1)" ] ||
  { echo "device-check-dry-run: Eigen or oneDNN is still here"; exit 1; }
cd "$source"
[ "${DRY_RUN_KEEP_BUILD:-0}" = 1 ] || rm -rf build-device  # 1: reuse an earlier dry run's build-device/
status=0
PYTHONPATH=$scratch/site-packages OUT=$scratch/out DEVICE_CHECK_STOP_AFTER=build DEVICE_CHECK_BUDGET_S=3600 \
  DEVICE_CHECK_BUILD_BUDGET_S=3000 DEVICE_CHECK_WORK=$scratch/device-check bash scripts/device-check.sh < /dev/null ||
  status=$?
echo "--- summary.txt (what the device tool would bring back) ---"
cat "$scratch/out/summary.txt"
tar -tzf "$scratch/out/device-check.tgz" | sed 's/^/  in device-check.tgz: /'
ls -la "$scratch/out"
exit $status
INNER
