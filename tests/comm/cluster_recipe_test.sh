#!/usr/bin/env bash
# docs/DISTRIBUTED.md's cluster recipe, run on this one machine: bench_allreduce --write-tuning writes the
# thresholds of allreduce auto, mpirun --hostfile launches trainlab train with them, and the run
# prints the hosts its ranks ran on and the thresholds it chose by (with the file they came from).
# Bad input: a tuning file that is not one is refused in one line by train and by --write-tuning (which
# leaves it as it was).
#   cluster_recipe_test.sh <scripts/mpirun> <build/bin>
set -uo pipefail
mpirun=$1 bin=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "cluster_recipe_test: FAILED: $*"; exit 1; }
# grep -q would stop reading at the first match and, under pipefail, fail the echo feeding it (SIGPIPE).
has() { grep "$@" >/dev/null; }
host=$(hostname)

echo "localhost slots=2" > "$tmp/hosts"
tune=$("$mpirun" --hostfile "$tmp/hosts" -np 2 "$bin/bench_allreduce" --write-tuning "$tmp/tuning.json" --sizes 4K,64K,1M \
        --seconds-per-size 0.02 --warmup 1 --min-iters 3 --no-ledger 2>&1) || { echo "$tune"; fail "--write-tuning failed"; }
echo "$tune" | grep -E "^tuning, world 2: (recursive doubling|halving-doubling|ring) .*\($tmp/tuning.json, world 2, run " ||
  { echo "$tune"; fail "no tuning line"; }
grep -q '"format": "trainlab-allreduce-tuning/1"' "$tmp/tuning.json" || fail "no tuning file"
grep -q '"world": 2' "$tmp/tuning.json" || fail "no world-2 entry"

train() {
  "$mpirun" --hostfile "$tmp/hosts" -np 2 "$bin/trainlab" train --steps 4 --batch 16 --train-samples 256 \
    --backend reference --threads 1 --log-every 2 --eval-at-end false "$@" 2>&1
}
out=$(train --allreduce auto --allreduce-tuning "$tmp/tuning.json") || { echo "$out"; fail "training failed"; }
echo "$out" | grep "data parallel:"
echo "$out" | has "2 ranks on 1 host: $host (ranks 0-1)" || fail "the hosts are not printed"
echo "$out" | has "auto (.*($tmp/tuning.json, world 2, run " ||
  fail "the thresholds and their file are not printed"

# A world the file has no entry for: the built-in thresholds, said so.
out=$("$mpirun" -np 1 "$bin/trainlab" train --steps 2 --batch 8 --train-samples 64 --backend reference --threads 1 \
        --eval-at-end false --allreduce auto --allreduce-tuning "$tmp/tuning.json" 2>&1) || { echo "$out"; fail "np 1"; }
echo "$out" | has "(built-in; $tmp/tuning.json has no entry for world 1)" || { echo "$out"; fail "world 1's note"; }
echo '{"not": "ours"}' > "$tmp/other.json"
out=$(train --allreduce auto --allreduce-tuning "$tmp/other.json") && fail "a foreign tuning file was accepted"
echo "$out" | has "allreduce tuning $tmp/other.json: not a trainlab all-reduce tuning file" ||
  { echo "$out"; fail "no one-line refusal"; }
out=$("$mpirun" -np 2 "$bin/bench_allreduce" --write-tuning "$tmp/other.json" --sizes 4K --no-ledger 2>&1) &&
  fail "--write-tuning replaced a file that was not a tuning file"
echo "$out" | has "not a trainlab all-reduce tuning file" || { echo "$out"; fail "--write-tuning's refusal"; }
[ "$(cat "$tmp/other.json")" = '{"not": "ours"}' ] || fail "--write-tuning changed the foreign file"
echo "cluster_recipe_test: ok"
