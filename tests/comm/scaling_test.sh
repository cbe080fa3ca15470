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

# The communication hooks side by side: world 1 every round (efficiency), half the bytes on the
# wire with bf16, the targets line, and the paired accuracy table.
output=$("$mpirun" -np 2 "$binary" --worlds 1,2 --grad-compress none,bf16 --repeats 2 --steps 2 --warmup 1 \
  --accuracy-steps 3 --accuracy-seeds 2 --no-peer --no-ledger --decode-cost 0 --batch 8 2>&1)
status=$?
echo "$output"
[ "$status" -eq 0 ] || fail "bench_scaling --grad-compress none,bf16 exited $status"
none_wire=$(echo "$output" | grep -E '^\| 2 \| compress none \|' | awk -F'|' '{print $9}' | grep -oE '[0-9.]+')
bf16_wire=$(echo "$output" | grep -E '^\| 2 \| compress bf16 \|' | awk -F'|' '{print $9}' | grep -oE '[0-9.]+')
[ -n "$none_wire" ] && [ -n "$bf16_wire" ] || fail "no bytes-on-the-wire column for compress none and bf16"
awk -v a="$none_wire" -v b="$bf16_wire" 'BEGIN { exit !(b > 0.49 * a && b < 0.51 * a) }' ||
  fail "bf16 puts $bf16_wire MiB on the wire, not half of none's $none_wire MiB"
echo "$output" | grep -qE '^targets at world 2: compress none weak efficiency .* >= 92%: (met|MISSED); compress bf16 weak efficiency .* >= 95%: (met|MISSED)' ||
  fail "no targets line"
echo "$output" | grep -qE '^\| compress bf16 \| .* \| [+-][0-9.]+ pp .* \| (yes|NO: compression costs accuracy here) \|' ||
  fail "no paired accuracy row for bf16"
bad=$("$mpirun" -np 1 "$binary" --worlds 1 --grad-compress none,fp8 --no-ledger 2>&1)
echo "$bad" | grep -q "'fp8' is not a hook (none, bf16, fp16" || fail "--grad-compress fp8 not refused by name"

bad=$("$mpirun" -np 1 "$binary" --worlds 1 --comm nccl --no-ledger 2>&1)
echo "$bad" | grep -q "comm nccl works on GPU memory: give --backend cuda" || fail "--comm nccl on a CPU backend not refused"
echo "$output" | grep -q "^# communicator mpi: host memory, through" || echo "(no communicator line in the hooks run)"

echo "PASS: both tables, the LR rule, the straggler line, and the hooks compared"
