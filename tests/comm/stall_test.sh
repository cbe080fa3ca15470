#!/usr/bin/env bash
# A stalled rank must not hang the job. Usage: stall_test.sh MPIRUN STALL BINARY ARGS...
# runs BINARY ARGS at 2 ranks with TRAINLAB_DEBUG_STALL=STALL ("1:60[:operation]": rank 1 stalls
# for 60 s) and a 2 s deadline in ARGS: rank 0 must name the operation and rank 1, and the job
# must end with a non-zero status long before the stall would (and, with STALL_OPERATION set, name
# that operation).
set -u
mpirun=$1
stall=$2
shift 2
start=$(date +%s)
output=$(TRAINLAB_DEBUG_STALL=$stall timeout 50 "$mpirun" -np 2 "$@" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
echo "$output" | tail -n 8
echo "exit status $status after ${elapsed}s"
fail() { echo "FAIL: $1"; exit 1; }
[ "$status" -ne 0 ] || fail "the job exited 0"
[ "$status" -ne 124 ] || fail "the job hung until this test's own 50 s timeout"
echo "$output" | grep -q "stalling for" || fail "rank 1 never stalled (the knob did not fire)"
echo "$output" | grep -q "timed out after" || fail "no rank said it timed out"
# The ring names the peer it waits on; a native collective names the ranks that never arrived.
echo "$output" | grep -qE "(to|from) rank 1 |rank 1 did not arrive" || fail "the message does not name the stalled peer (rank 1)"
# STALL_OPERATION (optional): the operation the message must name beside the peer ("ring all-gather").
if [ -n "${STALL_OPERATION:-}" ]; then
  echo "$output" | grep -q "rank 1 ($STALL_OPERATION)" || fail "the message does not name the $STALL_OPERATION"
fi
[ "$elapsed" -lt 30 ] || fail "it took ${elapsed}s, far past the 2 s deadline"
echo "PASS: the stalled peer was named and the job ended in ${elapsed}s"
