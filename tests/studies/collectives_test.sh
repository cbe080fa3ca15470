#!/usr/bin/env bash
# bench_allreduce --collective at 3 ranks (uneven chunks, a folded rank): reduce_scatter, all_gather
# and broadcast, each checked element by element (#wrong 0 on every line), a row per arm with its
# collective; the all-reduce's section ignores them and the collectives section draws each with a
# figure. Refusals: an unknown collective, and --write-tuning with another collective.
#   collectives_test.sh <scripts/mpirun> <bench_allreduce> <bench_report>
set -uo pipefail
mpirun=$1 bench=$2 report=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "collectives_test: FAILED: $*"; exit 1; }
# grep -q would stop reading at the first match and, under pipefail, fail the echo feeding it (SIGPIPE).
has() { grep "$@" >/dev/null; }
ledger=$tmp/ledger.jsonl
for c in reduce_scatter all_gather broadcast; do
  out=$("$mpirun" -np 3 "$bench" --collective "$c" --sizes 4K,100000B --seconds-per-size 0.01 --min-iters 2 \
          --max-iters 3 --ledger "$ledger" 2>&1) || { echo "$out"; fail "$c failed"; }
  echo "$out"
  echo "$out" | has "^# bench_allreduce: $c, 3 ranks" || fail "$c: no header"
  echo "$out" | has "^results all correct" || fail "$c: not all correct"
  # Every table line ends in its #wrong: 0.
  lines=$(echo "$out" | grep -E '^ +(4K|100000B) ')
  [ -n "$lines" ] || fail "$c: no table lines"
  echo "$lines" | has -vE ' 0$' && fail "$c: a line with wrong elements"
done
[ "$(grep -c '"collective":"reduce_scatter"' "$ledger")" -eq 6 ] || fail "expected 6 reduce_scatter rows (ring, halving_doubling, native x 2 sizes)"
[ "$(grep -c '"collective":"all_gather"' "$ledger")" -eq 6 ] || fail "expected 6 all_gather rows"
[ "$(grep -c '"collective":"broadcast"' "$ledger")" -eq 2 ] || fail "expected 2 broadcast rows"
[ "$(grep -c '"wrong":0' "$ledger")" -eq 14 ] || fail "expected #wrong 0 on every row"
"$report" --ledger "$ledger" --out "$tmp/REPORT.md" >/dev/null || fail "bench_report failed"
for c in reduce_scatter all_gather broadcast; do
  grep -q "^## $c: bus bandwidth against size, 3 ranks" "$tmp/REPORT.md" || fail "no $c section"
  ls "$tmp"/figures/"$c"_*.svg >/dev/null 2>&1 || fail "no $c figure"
done
grep -q "^## All-reduce" "$tmp/REPORT.md" && fail "the all-reduce section drew another collective's rows"
out=$("$mpirun" -np 2 "$bench" --collective gather --no-ledger 2>&1) && fail "an unknown collective ran"
echo "$out" | has "gather not in {all_reduce,reduce_scatter,all_gather,broadcast}" || { echo "$out"; fail "no list of the allowed"; }
out=$("$mpirun" -np 2 "$bench" --collective broadcast --write-tuning "$tmp/t.json" --no-ledger 2>&1) && fail "--write-tuning with broadcast ran"
echo "$out" | has "write-tuning tunes the all-reduce" || { echo "$out"; fail "--write-tuning's refusal"; }
echo "collectives_test: ok"
