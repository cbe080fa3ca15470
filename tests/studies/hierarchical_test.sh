#!/usr/bin/env bash
# bench_allreduce --node-size 2 at 4 ranks over TCP alone (--mca btl tcp,self: the two-"node"
# stand-in for a cluster, shared memory inside a node): every arm checked element by element
# (#wrong 0), the prediction table and its verdict printed, a row per arm with the node size, the
# report's two-level section with its figure (and the all-reduce section leaving those rows alone).
# Refusals, one line each: a node size that does not divide the world, --node-size with another
# collective.
#   hierarchical_test.sh <scripts/mpirun> <bench_allreduce> <bench_report>
set -uo pipefail
mpirun=$1 bench=$2 report=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "hierarchical_test: FAILED: $*"; exit 1; }
# grep -q would stop reading at the first match and, under pipefail, fail the echo feeding it (SIGPIPE).
has() { grep "$@" >/dev/null; }
ledger=$tmp/ledger.jsonl
out=$("$mpirun" -np 4 --mca btl tcp,self "$bench" --node-size 2 --sizes 4K,100000B,1M --seconds-per-size 0.01 \
        --min-iters 2 --max-iters 3 --ledger "$ledger" 2>&1) || { echo "$out"; fail "the two-level run failed"; }
echo "$out"
echo "$out" | has "^# two levels: 2 nodes x 2 ranks (node size 2); inside a node: shared memory" || fail "no two-level header"
echo "$out" | has "transport tcp,self" || fail "the forced transport is not named"
echo "$out" | has "results all correct" || fail "not all correct"
lines=$(echo "$out" | grep -E '^ +(4K|100000B|1M) ')
[ -n "$lines" ] || fail "no table lines"
echo "$lines" | has -vE ' 0$' && fail "a line with wrong elements"
echo "$out" | has -E '^ +1M +[0-9]+ +hierarchical ' || fail "no hierarchical line"
echo "$lines" | has -E '(within_nodes|across_nodes)' && fail "a link arm in the all-reduce table"
echo "$out" | has "^| size | flat ring us | hierarchical us" || fail "no prediction table"
echo "$out" | has "^inside a node (within_nodes), as a ring of 2: one line alpha" || fail "no fit inside a node"
echo "$out" | has "^across nodes (across_nodes, S / node size), as a ring of 2: one line alpha" || fail "no fit across nodes"
echo "$out" | has -E "^target: the prediction within 25% of the measured time at every size: (met|MISSED)" || fail "no verdict"
echo "$out" | has "^| size | reduce-scatter inside us | across us | all-gather inside us | sum us |" || fail "no phase profile"
# 3 sizes x (ring, hierarchical, within_nodes, across_nodes, native), each with the node size.
[ "$(grep -c '"node_size":2' "$ledger")" -eq 15 ] || fail "expected 15 rows with node_size 2"
[ "$(grep -c '"intra_node":"shared_memory"' "$ledger")" -eq 15 ] || fail "expected the intra-node way on every row"
[ "$(grep -c '"wrong":0' "$ledger")" -eq 15 ] || fail "expected #wrong 0 on every row"
# across_nodes' rows carry its message, S / 2.
grep '"algorithm":"across_nodes"' "$ledger" | has '"bytes":524288' || fail "across_nodes' 1M row is not its 512K message"
"$report" --ledger "$ledger" --out "$tmp/REPORT.md" >/dev/null || fail "bench_report failed"
grep -q "^## The two-level all-reduce: 2 nodes x 2 ranks" "$tmp/REPORT.md" || fail "no two-level section"
ls "$tmp"/figures/allreduce_hierarchical_*.svg >/dev/null 2>&1 || fail "no two-level figure"
grep -q "^## All-reduce" "$tmp/REPORT.md" && fail "the all-reduce section drew the two-level rows"
out=$("$mpirun" -np 4 "$bench" --node-size 3 --no-ledger 2>&1) && fail "node size 3 at 4 ranks ran"
echo "$out" | has "node size 3 must divide the world's 4 ranks" || { echo "$out"; fail "no refusal of node size 3"; }
out=$("$mpirun" -np 2 "$bench" --node-size 2 --collective broadcast --no-ledger 2>&1) && fail "--node-size with broadcast ran"
echo "$out" | has "node-size times the hierarchical all-reduce" || { echo "$out"; fail "--node-size's refusal"; }
echo "hierarchical_test: ok"
