#!/usr/bin/env bash
# A stalled rank must not hang the job. Rank 1 stalls for 60 s (TRAINLAB_DEBUG_STALL) while the
# deadline is 2 s: rank 0 must name the operation and the peer it waited for, and the job must end
# with a non-zero status long before the stall would.
set -u
mpirun=$1
binary=$2
start=$(date +%s)
output=$(TRAINLAB_DEBUG_STALL=1:60 timeout 50 "$mpirun" -np 2 "$binary" --sizes 1M --comm-timeout 2 --no-ledger 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$output" | tail -n 8
echo "exit status $status after ${elapsed}s"
fail() { echo "FAIL: $1"; exit 1; }
[ "$status" -ne 0 ] || fail "the job exited 0"
[ "$status" -ne 124 ] || fail "the job hung until this test's own 50 s timeout"
echo "$output" | grep -q "timed out after" || fail "no rank said it timed out"
echo "$output" | grep -qE "(to|from) rank 1 " || fail "the message does not name the stalled peer (rank 1)"
[ "$elapsed" -lt 30 ] || fail "it took ${elapsed}s, far past the 2 s deadline"
echo "PASS: the stalled peer was named and the job ended in ${elapsed}s"
