#!/usr/bin/env bash
# bench_scaling, briefly, at 2 ranks: both tables print, and the LR follows the global batch
# against the fixed base batch (weak: 0.01 then 0.02; strong: the global batch never moves, so
# neither does the LR: 0.02 at both world sizes). Times are not checked.
set -u
mpirun=$1
binary=$2
output=$("$mpirun" -np 2 "$binary" --worlds 1,2 --repeats 1 --steps 2 --warmup 1 --trials 2 --trial-steps 2 \
  --no-peer --no-ledger --no-ablation --decode-cost 0 --batch 8 --global-batch 16 --base-batch 8 --base-lr 0.01 2>&1)
status=$?
echo "$output"
fail() { echo "FAIL: $1"; exit 1; }
[ "$status" -eq 0 ] || fail "bench_scaling exited $status"
weak=$(echo "$output" | sed -n '/^Weak scaling/,/^$/p')
strong=$(echo "$output" | sed -n '/^Strong scaling/,/^$/p')
echo "$weak" | grep -qE '^\| 1 \| 8 \| 0\.0100 \|' || fail "weak world 1: global batch 8 at lr 0.0100 expected"
echo "$weak" | grep -qE '^\| 2 \| 16 \| 0\.0200 \|' || fail "weak world 2: global batch 16 at lr 0.0200 expected"
echo "$strong" | grep -qE '^\| 1 \| 16 \| 0\.0200 \|' || fail "strong world 1: per-worker batch 16 at lr 0.0200 expected"
echo "$strong" | grep -qE '^\| 2 \| 8 \| 0\.0200 \|' || fail "strong world 2: per-worker batch 8 at lr 0.0200 (unchanged) expected"
echo "$output" | grep -q "^Communication fraction" || fail "no communication-fraction table"
echo "$output" | grep -q "^slowest rank: " || fail "no slowest rank named"
echo "PASS: both tables, the LR rule and the straggler line"
