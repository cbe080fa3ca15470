#!/usr/bin/env bash
# A rank that stalls in the middle of DDP training must not hang the job: rank 1 stalls for 60 s
# before its 40th communication (inside the first steps' ring all-reduces, past the parameter
# broadcast) while the deadline is 2 s. Rank 0 must name the operation and rank 1, and the job
# must end with a non-zero status long before the stall would.
set -u
mpirun=$1
trainlab=$2
start=$(date +%s)
output=$(TRAINLAB_DEBUG_STALL=1:60:40 timeout 50 "$mpirun" -np 2 "$trainlab" train --steps 20 --batch 16 \
  --train-samples 256 --backend reference --threads 1 --allreduce ring --bucket-cap-mb 0.05 --comm-timeout 2 \
  --eval-at-end false 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$output" | tail -n 8
echo "exit status $status after ${elapsed}s"
fail() { echo "FAIL: $1"; exit 1; }
[ "$status" -ne 0 ] || fail "the job exited 0"
[ "$status" -ne 124 ] || fail "the job hung until this test's own 50 s timeout"
echo "$output" | grep -q "stalling for 60.0 s before operation 40" || fail "rank 1 never stalled (the knob did not fire)"
echo "$output" | grep -q "timed out after" || fail "no rank said it timed out"
echo "$output" | grep -qE "(to|from) rank 1 " || fail "the message does not name the stalled peer (rank 1)"
[ "$elapsed" -lt 30 ] || fail "it took ${elapsed}s, far past the 2 s deadline"
echo "PASS: the stalled rank was named and the job ended in ${elapsed}s"
