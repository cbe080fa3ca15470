#!/usr/bin/env bash
# A DDP training run prints every rank's step-time distribution and records it (train --ledger);
# diagnose reads it back from the run's rows (check 4).
#   ddp_record_test.sh <scripts/mpirun> <trainlab>
set -uo pipefail
mpirun=$1 trainlab=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "ddp_record_test: FAILED: $*"; exit 1; }
out=$("$mpirun" -np 2 "$trainlab" train --steps 12 --batch 16 --train-samples 256 --backend reference --threads 1 \
        --log-every 4 --eval-at-end false --ledger "$tmp/ledger.jsonl" 2>&1) || { echo "$out"; fail "training failed"; }
echo "$out" | grep "per-rank step time over 7 measured steps: p50 .* slowest rank [01]" || fail "no per-rank line"
run=$(echo "$out" | sed -n 's/^ledger: .* (run \(.*\))$/\1/p')
[ -n "$run" ] || fail "no run id in: $out"
[ "$(grep -c '"kind":"train_progress"' "$tmp/ledger.jsonl")" -eq 3 ] || fail "expected 3 progress rows (steps 4, 8, 12)"
grep -q '"kind":"train_run".*"ranks":\[{.*"rank":0.*"rank":1' "$tmp/ledger.jsonl" || fail "the summary row lacks both ranks"
diag=$("$trainlab" diagnose "$run" --ledger "$tmp/ledger.jsonl") || fail "diagnose failed"
echo "$diag"
echo "$diag" | grep -Eq "^4\. per-rank step-time distribution +(ok|PROBLEM)" || fail "check 4 did not read the ranks"
echo "ddp_record_test: ok"
