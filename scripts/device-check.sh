#!/usr/bin/env bash
# The one command for a GPU machine (an H200 with nvcc, CMake, ninja and PyTorch, no apt, no
# network). Prepare here first: scripts/fetch-device-debs.sh, then run this there with .debs/
# carried along. It unpacks the Debian packages into a private prefix (dpkg -x; nothing is
# installed), configures and builds the CUDA build, runs the GPU tests (DDP over NCCL among them),
# the ring and ncclAllReduce side by side (bench_allreduce --comm nccl), a short CUDA ladder and
# trainlab against PyTorch's eager SmallCNN step on the same GPU (batch 256, f32 and bf16), and
# prints a compact table last. Everything it measures also lands under $OUT (or results/device/).
# Budget: at most 8 minutes on an H200; each stage has its own timeout. DEVICE_CHECK_STOP_AFTER=configure
# stops after the configure step (to check the unpacked prefix on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results/device}
mkdir -p "$out"
log() { echo "device-check: $*" | tee -a "$out/summary.txt"; }
stage() {  # stage NAME SECONDS COMMAND...: runs it with a timeout, its output in $out/NAME.log
  local name=$1 seconds=$2; shift 2
  local start=$(date +%s)
  timeout "$seconds" "$@" > "$out/$name.log" 2>&1
  local status=$?
  log "$name: exit $status after $(( $(date +%s) - start ))s"
  return $status
}

nvidia-smi -L 2>&1 | tee "$out/gpu.txt" || log "nvidia-smi failed"
command -v nvcc >/dev/null || { log "no nvcc on PATH: cannot build"; exit 2; }

# 1. The Debian packages, unpacked into a prefix.
prefix=/tmp/trainlab-prefix
if ls .debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$prefix"
  for deb in .debs/*.deb; do
    if command -v dpkg >/dev/null; then dpkg -x "$deb" "$prefix"
    else (cd "$prefix" && ar p "$OLDPWD/$deb" data.tar.xz | tar -xJ); fi
  done
  export CMAKE_PREFIX_PATH=$prefix/usr
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
  export OPAL_PREFIX=$prefix/usr  # OpenMPI relocated: its wrappers and mpirun find themselves here
  export PATH=$prefix/usr/bin:$PATH
  export CPATH=$prefix/usr/include:${CPATH:-}
  log "unpacked $(ls .debs/*.deb | wc -l) packages into $prefix"
else
  log "no .debs/ (run scripts/fetch-device-debs.sh where apt works): using what this machine has"
fi

# 2. Configure and build (CUDA on, sm_90 + PTX).
stage configure 120 cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINLAB_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DTRAINLAB_BUILD_TESTS=ON || { tail -40 "$out/configure.log"; exit 1; }
if [ "${DEVICE_CHECK_STOP_AFTER:-}" = configure ]; then log "stopping after configure (DEVICE_CHECK_STOP_AFTER)"; exit 0; fi
stage build 300 cmake --build build-device -j "$(nproc)" || { grep -m 20 -E "error|Error" "$out/build.log"; exit 1; }
bin=build-device/bin
$bin/trainlab backends | tee -a "$out/summary.txt"

# 3. The GPU tests (the cross-backend harness on cuda), then the rest of the suite briefly.
stage gpu-tests 180 ctest --test-dir build-device -L gpu --output-on-failure
gpu_tests=$?

# 3b. NCCL on this GPU (world 1 on a one-GPU machine; every GPU present otherwise): the ring (its
#     device path: grouped ncclSend/ncclRecv steps and our reduction kernel) against ncclAllReduce,
#     each size checked. DDP over NCCL with no host copies ran in gpu-tests (gpu.nccl-ddp).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || gpus=1
stage nccl 90 scripts/mpirun -np "$gpus" $bin/bench_allreduce --comm nccl --sizes 4K,1M,64M --dtype f32 \
  --ledger "$out/ledger_cuda.jsonl"
grep -E "^ *[0-9.]+[KMG]? |targets|correct" "$out/nccl.log" | tee -a "$out/summary.txt"

# 4. trainlab against PyTorch eager on this GPU: batch 256, f32 and bf16, interleaved; and trainlab
#    bf16 with fused kernels and CUDA graph replay (the stretch target, against the same eager bf16).
torch_py=$(command -v python3)
for round in 1 2 3; do
  for dtype in f32 bf16; do
    timeout 60 $bin/trainlab throughput --backend cuda --dtype $dtype --batch 256 --seconds 3 \
      >> "$out/trainlab_$dtype.jsonl" 2>> "$out/throughput.err"
    timeout 150 "$torch_py" bench/peers/torch_smallcnn.py --device cuda --dtype $dtype --batch 256 --seconds 1 \
      --variant all >> "$out/torch_$dtype.jsonl" 2>> "$out/throughput.err"
  done
  timeout 60 $bin/trainlab throughput --backend cuda --dtype bf16 --batch 256 --seconds 3 --fuse --cuda-graph \
    >> "$out/trainlab_bf16_graph.jsonl" 2>> "$out/throughput.err"
done

# 5. A short CUDA ladder (every rung once: quick, 1 repeat).
stage ladder 150 $bin/bench_ladder --device cuda --quick --repeats 1 --ledger "$out/ledger_cuda.jsonl"

# 5b. The cost-to-accuracy study's quick form on the GPU (device from configs/cost_cuda.yaml, CUDA
#     event timing); the rate is a placeholder, the rows are the point.
stage cost 90 $bin/cost_to_accuracy --config configs/cost_cuda.yaml --quick --rate 1 --ledger "$out/cost_cuda.jsonl"

# 6. The table, last.
python3 - "$out" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
def median(path):
    """trainlab's median, or PyTorch's best variant's (every variant each round; the best by median,
    ties to the higher minimum, then the peer's order: compare_torch.best_variant's rule)."""
    try:
        rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    except FileNotFoundError:
        return None, "missing"
    errors = [r.get("error") for r in rows if "error" in r]
    if any("variants" in r for r in rows):
        by = {}
        for r in rows:
            for v, res in r.get("variants", {}).items():
                by.setdefault(v, [])
                if "samples_per_s" in res:
                    by[v].append(res["samples_per_s"])
        ranked = [(statistics.median(x), min(x), -i, v) for i, (v, x) in enumerate(by.items()) if x]
        if not ranked:
            return None, (errors[0] if errors else "no variant ran")
        best = max(ranked)
        return best[0], best[3]
    values = [r["samples_per_s"] for r in rows if "samples_per_s" in r]
    return (statistics.median(values) if values else None), (errors[0] if errors else "")
print("\n| SmallCNN, batch 256 | trainlab samples/s | PyTorch eager samples/s (best variant) | ratio |")
print("|---|---|---|---|")
for label, ours_file, dtype in (("f32", "trainlab_f32", "f32"), ("bf16 (target >= 1.0x)", "trainlab_bf16", "bf16"),
                                 ("bf16, fused + CUDA graphs (stretch 1.5x)", "trainlab_bf16_graph", "bf16")):
    ours, e1 = median(os.path.join(out, f"{ours_file}.jsonl"))
    theirs, e2 = median(os.path.join(out, f"torch_{dtype}.jsonl"))
    ratio = f"{ours / theirs:.2f}x" if ours and theirs else "n/a"
    shown = f"{theirs:.1f} ({e2})" if theirs else (e2 or "failed")
    print(f"| {label} | {ours or e1 or 'failed'} | {shown} | {ratio} |")
PY
log "gpu tests exit $gpu_tests; logs in $out"
