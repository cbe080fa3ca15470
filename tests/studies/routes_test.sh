#!/usr/bin/env bash
# bench_allreduce --routes at 3 ranks: seed 004's routes (to_one, sharded, ring, single_copy, native),
# each checked against the exact sum on integer-valued data, its table of measured against predicted,
# and rows that say study "routes" and stay out of the all-reduce section. Refused with other arms.
#   routes_test.sh <scripts/mpirun> <bench_allreduce> <bench_report>
set -uo pipefail
mpirun=$1 bench=$2 report=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "routes_test: FAILED: $*"; exit 1; }
has() { grep "$@" >/dev/null; }
ledger=$tmp/ledger.jsonl
out=$("$mpirun" -np 3 "$bench" --routes --sizes 4K,100000B,1M --seconds-per-size 0.01 --min-iters 2 --max-iters 3 \
        --ledger "$ledger" 2>&1) || { echo "$out"; fail "the routes run failed"; }
echo "$out"
echo "$out" | has "results all correct" || fail "a route's result was wrong"
echo "$out" | has "^# seed 004's routes: measured (median) against seed 001's alpha-beta model; the ring's medians fitted" ||
  fail "no routes table"
for route in to_one sharded ring single_copy native; do
  [ "$(echo "$out" | grep -cE "^\| (4K|100000B|1M) \| $route \|")" -eq 3 ] || fail "$route: not 3 sizes in the table"
done
[ "$(grep -c '"study":"routes"' "$ledger")" -eq 15 ] || fail "expected 15 rows marked study routes"
"$report" --ledger "$ledger" --out "$tmp/REPORT.md" >/dev/null || fail "bench_report failed"
grep -q "^## All-reduce" "$tmp/REPORT.md" && fail "the all-reduce section drew the routes run"
out=$("$mpirun" -np 2 "$bench" --routes --algorithms ring,single_copy --no-ledger 2>&1) && fail "--routes with --algorithms ran"
echo "$out" | has "routes times its own arms" || { echo "$out"; fail "--routes' refusal"; }
# The via-host route needs a backend with its own memory (cuda), and --routes.
out=$("$mpirun" -np 2 "$bench" --routes --routes-device reference --no-ledger 2>&1) && fail "--routes-device reference ran"
echo "$out" | has "routes-device reference: its tensors are host memory already" || { echo "$out"; fail "--routes-device's refusal"; }
out=$("$mpirun" -np 2 "$bench" --routes-device cuda --no-ledger 2>&1) && fail "--routes-device without --routes ran"
echo "$out" | has "give --routes too" || { echo "$out"; fail "--routes-device without --routes: $out"; }
echo "routes_test: ok"
