#!/usr/bin/env bash
# The one command for a GPU machine (an H200 with nvcc, CMake, ninja and PyTorch; no apt, no
# network; a bare machine each time). Prepare here first: scripts/fetch-device-debs.sh, then run
# this there with .debs/ carried along (the device tool: carry [".debs"], timeout ~540 s).
#
# The plan, on a 16-core machine; the whole check stops cleanly when DEVICE_CHECK_BUDGET_S (default
# 480) is spent, each stage's timeout capped by what is left, the optional stages only when their
# whole budget still fits:
#
#   stage        budget  what
#   unpack         15 s  .debs/ into a private prefix (dpkg -x, or ar + tar), Open MPI's usual names linked
#   configure      45 s  cmake, CUDA on (sm_90 + PTX); where cuDNN and NCCL were found goes to the summary
#   build         150 s  only the targets the stages below run, -j of the machine's cores
#   smoke          20 s  the build runs: trainlab backends --ops, two MPI ranks of bench_allreduce
#   gpu-tests      80 s  ctest -L gpu: the cross-backend harness on cuda, the kernel test, DDP over NCCL
#   nccl           40 s  bench_allreduce --comm nccl: the ring against ncclAllReduce, every size checked
#   throughput    100 s  trainlab f32, bf16 and bf16 fused + CUDA graphs against PyTorch eager's variants, one round
#   ladder         45 s  optional: bench_ladder --device cuda --quick --repeats 1
#   cost           35 s  optional: cost_to_accuracy --quick on the GPU
#   routes         25 s  optional: bench_allreduce --routes --routes-device cuda, two ranks on GPU 0
#   total         555 s  (9.3 minutes; one device-tool command may run 10)
#
# What comes back (the device tool returns at most 8 files from $OUT): $OUT/summary.txt, the table,
# rewritten after every stage so that a run cut short still says what it found, and
# $OUT/device-check.tgz, every log and ledger, repacked after every stage. Nothing else is written
# to $OUT. DEVICE_CHECK_STOP_AFTER=configure|build stops after that stage, and
# DEVICE_CHECK_BUILD_BUDGET_S gives the build more time (the dry run without a GPU on a 2-core
# machine: scripts/device-check-dry-run.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source=$(pwd)
out=${OUT:-results/device}
work=${DEVICE_CHECK_WORK:-/tmp/device-check}
budget=${DEVICE_CHECK_BUDGET_S:-480}
mkdir -p "$out"
rm -rf "$work"
mkdir -p "$work"
started=$(date +%s)
left() { echo $((budget - ($(date +%s) - started))); }

plan="unpack 15, configure 45, build 150, smoke 20, gpu-tests 80, nccl 40, throughput 100, ladder 45 (optional), cost 35 (optional), routes 25 (optional): 555 s planned, stopping at ${budget} s"
echo "device-check: plan: $plan"
echo "device-check: plan: $plan" > "$work/stages.txt"

# The summary from whatever exists so far; then the archive of every log.
summarize() {
  python3 "$source/scripts/device_check_summary.py" "$work" > "$out/summary.txt.tmp" 2>> "$work/summary.err" &&
    mv "$out/summary.txt.tmp" "$out/summary.txt"
  tar -czf "$out/device-check.tgz.tmp" -C "$(dirname "$work")" "$(basename "$work")" 2>/dev/null &&
    mv "$out/device-check.tgz.tmp" "$out/device-check.tgz"
}
note() { echo "device-check: $*" | tee -a "$work/stages.txt"; }

# stage NAME BUDGET [optional] -- COMMAND...: runs COMMAND with the budget's timeout, or what is
# left if less; its output in $work/NAME.log. An optional stage runs only if its whole budget fits.
stage() {
  local name=$1 seconds=$2 optional=0
  shift 2
  if [ "$1" = optional ]; then optional=1; shift; fi
  [ "$1" = -- ] && shift
  local remaining
  remaining=$(left)
  if [ "$remaining" -lt 10 ] || { [ $optional -eq 1 ] && [ "$remaining" -lt "$seconds" ]; }; then
    note "$name: skipped: $remaining s of the ${budget} s budget left (needs $seconds)"
    summarize
    return 99
  fi
  [ "$remaining" -lt "$seconds" ] && seconds=$remaining
  local start
  start=$(date +%s)
  timeout "$seconds" "$@" > "$work/$name.log" 2>&1
  local status=$?
  local how="exit $status"
  [ $status -eq 124 ] && how="timed out ($seconds s)"
  note "$name: $how after $(($(date +%s) - start)) s"
  summarize
  return $status
}

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$work/gpu.txt" 2>&1 ||
  note "nvidia-smi failed"
command -v nvcc > /dev/null || { note "no nvcc on PATH: cannot build"; summarize; exit 2; }
nvcc --version | tail -n 2 >> "$work/gpu.txt"
cores=$(nproc)

# 1. The Debian packages, unpacked into a prefix; the names update-alternatives would have made.
prefix=/tmp/trainlab-prefix
unpack() {
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for deb in .debs/*.deb; do
    if command -v dpkg > /dev/null; then
      dpkg -x "$deb" "$prefix" || return 1
    else
      (cd "$prefix" && ar p "$source/$deb" "$(ar t "$source/$deb" | grep '^data.tar')" | tar -x) || return 1
    fi
  done
  local bin=$prefix/usr/bin pc=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig psm
  for name in mpirun mpiexec mpicc mpicxx mpic++ mpiCC; do
    [ -e "$bin/$name.openmpi" ] && ln -sf "$name.openmpi" "$bin/$name"
  done
  for name in mpi mpi-c mpi-cxx mpi-fort; do
    [ -e "$pc/o${name}.pc" ] && ln -sf "o${name}.pc" "$pc/$name.pc"
  done
  [ -e "$bin/pkgconf" ] && [ ! -e "$bin/pkg-config" ] && ln -sf pkgconf "$bin/pkg-config"
  # libpsm-infinipath1 (an Open MPI transport's library) is found through an alternative, too.
  psm=$prefix/usr/lib/libpsm1/libpsm_infinipath.so.1.16
  [ -e "$psm" ] && ln -sf ../libpsm1/libpsm_infinipath.so.1.16 "$prefix/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
  echo "unpacked $(ls .debs/*.deb | wc -l) packages into $prefix"
}
if ls .debs/*.deb > /dev/null 2>&1; then
  stage unpack 15 -- bash -c "$(declare -f unpack); source=$source; prefix=$prefix; unpack" ||
    { note "unpack failed: $(tail -n 3 "$work/unpack.log")"; exit 1; }
  export CMAKE_PREFIX_PATH=$prefix/usr
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
  export OPAL_PREFIX=$prefix/usr  # Open MPI relocated: its wrappers and mpirun find themselves here
  export PATH=$prefix/usr/bin:$PATH
  # pkg-config reads only the prefix's .pc files, and relocates their /usr paths into it (they say
  # prefix=/usr: dpkg -x does not rewrite them).
  export PKG_CONFIG_LIBDIR=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  # Debian's multiarch headers (hwloc's autogen/config.h, ...) live under include/x86_64-linux-gnu.
  export CPATH=$prefix/usr/include:$prefix/usr/include/x86_64-linux-gnu:${CPATH:-}
  export LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}
else
  note "no .debs/ (run scripts/fetch-device-debs.sh where apt works): using what this machine has"
fi

# 2. Configure (CUDA on, sm_90 + PTX), saying where cuDNN and NCCL came from.
stage configure 45 -- cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINLAB_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DTRAINLAB_BUILD_TESTS=ON ||
  { note "configure failed: $(grep -m 3 -E "Error|error" "$work/configure.log")"; exit 1; }
grep -E "^-- trainlab: (cuDNN|NCCL) " "$work/configure.log" | sed 's/^-- /device-check: /' | tee -a "$work/stages.txt"
# The wheels' library folders (cuDNN loads its engines by name at run time).
if [ -f build-device/gpu-library-dirs.txt ]; then
  while read -r dir; do export LD_LIBRARY_PATH=$dir:$LD_LIBRARY_PATH; done < build-device/gpu-library-dirs.txt
fi
[ "${DEVICE_CHECK_STOP_AFTER:-}" = configure ] && { note "stopping after configure (DEVICE_CHECK_STOP_AFTER)"; exit 0; }

# 3. Build only what the stages run (make build-cuda's GPU targets, and bench_ladder).
targets=(trainlab trainlab_comm trainlab_cuda_kernels_test trainlab_comm_tests trainlab_cli trainlab_tests
         bench_allreduce bench_scaling bench_ladder cost_to_accuracy)
stage build "${DEVICE_CHECK_BUILD_BUDGET_S:-150}" -- cmake --build build-device -j "$cores" --target "${targets[@]}" ||
  { note "build failed: $(grep -m 5 -E "error" "$work/build.log" | cut -c1-300)"; exit 1; }
bin=build-device/bin

# 3b. The build runs here at all: its libraries resolve (the unpacked prefix, the wheels), every
#     backend answers (trainlab backends --ops: the cuda one's table, or why it cannot start), and
#     the relocated Open MPI launches two ranks (bench_allreduce over MPI, one small size).
smoke() {
  build-device/bin/trainlab backends --ops && scripts/mpirun -np 2 build-device/bin/bench_allreduce --comm mpi \
    --sizes 4K --no-ledger
}
stage smoke 20 -- bash -c "$(declare -f smoke); smoke"
cp "$work/smoke.log" "$work/backends.txt"
if [ "${DEVICE_CHECK_STOP_AFTER:-}" = build ]; then
  note "stopping after build and its smoke test (DEVICE_CHECK_STOP_AFTER)"
  summarize
  exit 0
fi

# 4. The GPU tests.
stage gpu-tests 80 -- ctest --test-dir build-device -L gpu --output-on-failure --timeout 60

# 5. NCCL on this machine's GPUs (world 1 on a one-GPU machine): the ring's device path against
#    ncclAllReduce, each size checked.
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || gpus=1
stage nccl 40 -- scripts/mpirun -np "$gpus" $bin/bench_allreduce --comm nccl --sizes 4K,1M,64M --dtype f32 \
  --ledger "$work/ledger_cuda.jsonl"

# 6. trainlab against PyTorch eager on this GPU, batch 256, one round: f32, bf16, and bf16 with fused
#    kernels and CUDA graph replay (against the same eager bf16 peer).
throughput() {
  local t=build-device/bin/trainlab
  timeout 15 $t throughput --backend cuda --dtype f32 --batch 256 --seconds 3 > "$1/trainlab_f32.jsonl"
  timeout 15 $t throughput --backend cuda --dtype bf16 --batch 256 --seconds 3 > "$1/trainlab_bf16.jsonl"
  timeout 15 $t throughput --backend cuda --dtype bf16 --batch 256 --seconds 3 --fuse --cuda-graph \
    > "$1/trainlab_bf16_graph.jsonl"
  for dtype in f32 bf16; do
    timeout 25 python3 bench/peers/torch_smallcnn.py --device cuda --dtype $dtype --batch 256 --seconds 1 \
      --variant all > "$1/torch_$dtype.jsonl"
  done
}
stage throughput 100 -- bash -c "$(declare -f throughput); throughput $work"

# 7. Optional, last: a short CUDA ladder and the cost study's quick form (CUDA event timing).
stage ladder 45 optional -- $bin/bench_ladder --device cuda --quick --repeats 1 --ledger "$work/ledger_cuda.jsonl" \
  --no-report
stage cost 35 optional -- $bin/cost_to_accuracy --config configs/cost_cuda.yaml --quick --rate 1 \
  --ledger "$work/cost_cuda.jsonl"
# Seed 004's via-host route (issue 48): two ranks on this GPU, each buffer in device memory copied
# to a pinned host buffer, summed by MPI there and copied back, beside the host routes, each against
# the model (the device-host copy rate measured at the run's start).
stage routes 25 optional -- env TRAINLAB_CUDA_DEVICE=0 scripts/mpirun -np 2 -x TRAINLAB_CUDA_DEVICE \
  $bin/bench_allreduce --routes --routes-device cuda --sizes 64K,1M,16M,64M --seconds-per-size 0.1 \
  --ledger "$work/ledger_cuda.jsonl"
note "done after $(($(date +%s) - started)) s of the ${budget} s budget"
summarize
cat "$out/summary.txt"
