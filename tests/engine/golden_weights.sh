#!/usr/bin/env bash
# The weights of short training runs, bit for bit: `trainlab train` must produce exactly the
# checkpoint recorded in tests/engine/golden/weights.txt (SHA-256 of model.safetensors and
# optimizer.safetensors). This pins the training step's arithmetic across refactors: a change
# that moves one bit of one weight fails here, naming the run.
#
# The reference backend is plain loops (the same bits on any x86-64 CPU, whatever the build's
# target); the default backend's kernels depend on the instruction set oneDNN picks, so its runs have
# one digest per ISA family the project is tested on (avx2, avx512_core, avx512_core_bf16: record
# the first two on an AVX-512 machine under ONEDNN_MAX_CPU_ISA=AVX2 / AVX512_CORE), and the one of
# this machine's ISA is checked. A run with no digest for this ISA is not checked, and then the whole
# test reports itself skipped (exit 77, ctest's SKIP_RETURN_CODE) after checking the rest: a run that
# checks nothing never reads as a pass. A digest that differs fails.
#
#   tests/engine/golden_weights.sh TRAINLAB            check every run
#   (runs named mpi2_* go through scripts/mpirun -np 2: data-parallel training, two ranks)
#   tests/engine/golden_weights.sh TRAINLAB --record   rewrite this ISA's lines from this build, keeping the
#                                               other ISAs' (after a change that is meant to move the
#                                               weights; say why in the commit, and record every ISA)
set -u
trainlab=$1
mode=${2:-check}
here=$(cd "$(dirname "$0")" && pwd)
table=$here/golden/weights.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name | backend flags and run flags (the run: 20 steps from the defaults unless a flag says otherwise).
# The default backend's runs name their threads: oneDNN's reductions are cut by thread, so the bits
# depend on the count, and the digests were recorded at 2 (a machine with more cores, or a test run
# under OMP_NUM_THREADS=1, would otherwise compute other bits and fail).
runs=(
  "reference_default|--backend reference"
  "reference_mixed|--backend reference --dtype bf16 --fuse --layout nhwc --optimizer adamw --lr 0.001 --schedule warmup_cosine --warmup-steps 5 --accumulate 2 --workers 2"
  "reference_f16|--backend reference --dtype f16 --loss-scale-init 1024 --loss-scale-growth-interval 3 --momentum 0.5 --weight-decay 0.01"
  "default_backend|--threads 2"
  "default_backend_bf16_nhwc|--threads 2 --dtype bf16 --layout nhwc --fuse --workers 1"
  "mpi2_reference_ring|--backend reference --threads 1 --allreduce ring --bucket-cap-mb 0.5 --accumulate 2 --batch 16"
)
mpirun=$(cd "$here/../.." && pwd)/scripts/mpirun

failures=0
unchecked=0
recorded=""
isas_seen=""
for entry in "${runs[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  dir=$work/$name
  # shellcheck disable=SC2086
  launcher=()
  case "$name" in mpi2_*) launcher=("$mpirun" -np 2) ;; esac
  if ! out=$("${launcher[@]}" "$trainlab" train --steps 20 --train-samples 640 --eval-samples 100 $flags --save "$dir" 2>&1); then
    echo "FAIL $name: trainlab train failed: $out"
    failures=$((failures + 1))
    continue
  fi
  isa=any
  case "$flags" in
    *"--backend reference"*) ;;
    *) isa=$(echo "$out" | sed -n 's/^backend: .*ISA \([a-z0-9_]*\).*/\1/p' | head -n 1) ;;
  esac
  sum=$(cat "$dir/model.safetensors" "$dir/optimizer.safetensors" | sha256sum | cut -d' ' -f1)
  if [ "$mode" = "--record" ]; then
    recorded+="$name $isa $sum"$'\n'
    isas_seen+=" $isa"
    echo "recorded $name ($isa): $sum"
    continue
  fi
  expected=$(awk -v n="$name" -v i="$isa" '$1 == n && ($2 == i) {print $3}' "$table")
  if [ -z "$expected" ]; then
    other=$(awk -v n="$name" '$1 == n {print $2}' "$table" | tr '\n' ' ' | sed 's/ *$//')
    echo "not checked $name: digests recorded for ISA ${other:-(none)}, this machine's is $isa"
    unchecked=$((unchecked + 1))
    continue
  fi
  if [ "$sum" = "$expected" ]; then
    echo "ok $name ($isa): $sum"
  else
    echo "FAIL $name ($isa): weights $sum, recorded $expected (flags: $flags)"
    failures=$((failures + 1))
  fi
done
if [ "$mode" = "--record" ]; then
  # The other ISAs' lines stay; this run's ISAs are replaced.
  keep=$(awk -v seen="$isas_seen" 'BEGIN { n = split(seen, s, " "); for (i = 1; i <= n; i++) drop[s[i]] = 1 }
                                   !/^#/ && NF == 3 && !($2 in drop)' "$table" 2>/dev/null)
  {
    echo "# name isa sha256(model.safetensors + optimizer.safetensors), written by tests/engine/golden_weights.sh --record"
    { [ -n "$keep" ] && printf "%s\n" "$keep"; printf "%s" "$recorded"; } | sort -k1,1 -k2,2
  } > "$table.tmp" && mv "$table.tmp" "$table"
  exit 0
fi
total=${#runs[@]}
[ $failures -eq 0 ] || { echo "$failures run(s) moved"; exit 1; }
if [ $unchecked -gt 0 ]; then
  echo "SKIPPED: $unchecked of $total runs have no digest for this machine's ISA (the other $((total - unchecked)) reproduced bit for bit); record them with --record"
  exit 77
fi
echo "every run ($total) reproduced bit for bit"
