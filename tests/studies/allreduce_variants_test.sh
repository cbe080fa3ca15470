#!/usr/bin/env bash
# bench/allreduce_variants.py end to end at 2 ranks on two small sizes: four MPI variants (Open MPI's
# decision and its forced ring, each under glibc's malloc and the tuned one) in one run, every
# process timing the ring beside them; bench_report's section names the strongest per size. Then
# the refusals, and a sweep whose every process fails (exit 1, nothing half-written).
#   allreduce_variants_test.sh <source dir> <bench_allreduce> <bench_report>
set -uo pipefail
src=$1 bench=$2 report=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "allreduce_variants_test: FAILED: $*"; exit 1; }
cd "$src" || fail "no source dir $src"
driver=bench/allreduce_variants.py
ledger=$tmp/ledger.jsonl
python3 "$driver" --np 2 --sizes 4K,64K --rounds 2 --algorithms decision,ring --hand-written ring,halving_doubling \
  --seconds-per-size 0.02 --bench "$bench" --ledger "$ledger" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "the sweep failed"; }
cat "$tmp/out"
[ "$(grep -c '^round [12]/2  mpi ' "$tmp/out")" -eq 8 ] || fail "expected 8 processes (4 variants x 2 rounds)"
# Each process: a row per size for the ring, halving-doubling and native, each with its process's
# variant and round.
[ "$(grep -c '"kind":"allreduce"' "$ledger")" -eq 48 ] || fail "expected 48 allreduce rows"
[ "$(grep -c '"algorithm":"halving_doubling","bytes"' "$ledger")" -eq 16 ] || fail "expected 16 halving-doubling rows"
for v in '"mpi_algorithm":"decision"' '"mpi_algorithm":"ring"'; do
  [ "$(grep '"algorithm":"native","bytes"' "$ledger" | grep -c "$v")" -eq 8 ] || fail "expected 8 native rows with $v"
  [ "$(grep '"algorithm":"ring","bytes"' "$ledger" | grep -c "$v")" -eq 8 ] || fail "expected 8 ring rows with $v"
done
[ "$(grep -c '"round":2' "$ledger")" -eq 24 ] || fail "expected 24 rows of round 2"
[ "$(grep '"algorithm":"ring","bytes"' "$ledger" | grep -c '"malloc":"tuned"')" -eq 8 ] || fail "expected 8 ring rows under the tuned malloc"
[ "$(grep -o '"run_id":"[^"]*"' "$ledger" | sort -u | wc -l)" -eq 1 ] || fail "the processes wrote more than one run"
"$report" --ledger "$ledger" --out "$tmp/REPORT.md" >/dev/null || fail "bench_report failed"
grep -q "^## All-reduce: trainlab's against the strongest MPI, 2 ranks" "$tmp/REPORT.md" || fail "no variant section"
grep -Eq '^\| 4K \| (ring|halving_doubling) \| [0-9.]+ \| `mpi (decision|ring), malloc (default|tuned)` \| [0-9.]+ \| [0-9.]+ \([0-9.]+-[0-9.]+\) \| (no|yes, [a-zA-Z ]+) \| [0-9.]+ \([0-9.]+, [0-9.]+-[0-9.]+\) \|' \
  "$tmp/REPORT.md" || fail "no 4K row naming its strongest variant"
grep -q '^| `mpi ring, malloc tuned` |' "$tmp/REPORT.md" || fail "no per-variant line"
grep -Eq "^Targets \(issue 27\): trainlab's best at or below 1.0x the strongest MPI variant at every size: (met|MISSED \(.+\))" \
  "$tmp/REPORT.md" || fail "no verdict on the targets"
grep -q '^| halving_doubling (trainlab), in the processes with malloc tuned |' "$tmp/REPORT.md" || fail "no halving-doubling line"
# Refusals: one line each, nothing run.
for args in "--np 1" "--rounds 0" "--algorithms decision,fastest" "--malloc jemalloc" "--mca btl" \
  "--hand-written ring,tree"; do
  python3 "$driver" $args --ledger "$tmp/refused.jsonl" --bench "$bench" >"$tmp/r.out" 2>&1 && fail "'$args' was accepted"
  [ "$(wc -l <"$tmp/r.out")" -eq 1 ] || fail "'$args': not one line: $(cat "$tmp/r.out")"
done
[ ! -e "$tmp/refused.jsonl" ] || fail "a refused sweep wrote to its ledger"
# A ledger that is a directory or a user's file: one line, the file unchanged (issue 49).
mkdir "$tmp/dir.jsonl"
echo "my notes" >"$tmp/notes.txt"
for ledger_arg in "$tmp/dir.jsonl" "$tmp/notes.txt"; do
  python3 "$driver" --ledger "$ledger_arg" --bench "$bench" >"$tmp/r.out" 2>&1 && fail "--ledger $ledger_arg was accepted"
  [ "$(wc -l <"$tmp/r.out")" -eq 1 ] || fail "--ledger $ledger_arg: not one line: $(cat "$tmp/r.out")"
  grep -q "Traceback" "$tmp/r.out" && fail "--ledger $ledger_arg: a traceback"
done
[ "$(cat "$tmp/notes.txt")" = "my notes" ] || fail "the notes file was changed"
scripts/mpirun -np 1 "$bench" --sizes 4K --ledger "$tmp/notes.txt" >"$tmp/b.out" 2>&1 && fail "bench_allreduce appended to a notes file"
grep -q "is not a ledger" "$tmp/b.out" || fail "bench_allreduce --ledger notes.txt: $(cat "$tmp/b.out")"
[ "$(cat "$tmp/notes.txt")" = "my notes" ] || fail "bench_allreduce changed the notes file"
for empty in "--ledger" "--write-tuning"; do
  scripts/mpirun -np 1 "$bench" --sizes 4K $empty '' >"$tmp/b.out" 2>&1 && fail "bench_allreduce $empty '' exited 0"
  grep -q "an empty path" "$tmp/b.out" || fail "bench_allreduce $empty '': $(cat "$tmp/b.out")"
done
# bench_allreduce itself: an unknown or repeated hand-written algorithm, named.
for spec in ring,tree ring,ring; do
  scripts/mpirun -np 1 "$bench" --algorithms "$spec" --sizes 4K --no-ledger >"$tmp/b.out" 2>&1 && fail "--algorithms $spec was accepted"
  grep -q "error: --algorithms '$spec'" "$tmp/b.out" || fail "--algorithms $spec: $(cat "$tmp/b.out")"
done
# Every process failing (a transport that does not exist): exit 1, said, no row.
python3 "$driver" --np 2 --sizes 4K --rounds 1 --algorithms decision --malloc default --mca btl=nonexistent \
  --bench "$bench" --ledger "$tmp/failed.jsonl" >"$tmp/f.out" 2>&1 && fail "a sweep of failed processes exited 0"
grep -q "every variant failed" "$tmp/f.out" || fail "the failure is not said: $(cat "$tmp/f.out")"
# A variant whose process fails (planted: Open MPI's ring forced): a failed row per size for it,
# with the reason, exit 1; the other variants' rows stand and the report says what failed.
printf '#!/usr/bin/env bash\n[ "${OMPI_MCA_coll_tuned_allreduce_algorithm:-}" = 4 ] && { echo "flaky: error: planted failure" >&2; exit 3; }\nexec %s "$@"\n' \
  "$bench" >"$tmp/flaky.sh"
chmod +x "$tmp/flaky.sh"
python3 "$driver" --np 2 --sizes 4K,64K --rounds 1 --algorithms decision,ring --seconds-per-size 0.02 \
  --bench "$tmp/flaky.sh" --ledger "$tmp/partial.jsonl" >"$tmp/p.out" 2>&1 && fail "a sweep with a failed variant exited 0"
[ "$(grep -c '"status":"failed"' "$tmp/partial.jsonl")" -eq 4 ] || fail "expected 4 failed rows (2 ring variants x 2 sizes)"
[ "$(grep '"status":"failed"' "$tmp/partial.jsonl" | grep -c 'planted failure')" -eq 4 ] || fail "the failed rows lack the reason"
"$report" --ledger "$tmp/partial.jsonl" --out "$tmp/P.md" >/dev/null || fail "bench_report failed on a sweep with failed rows"
grep -q "4 row(s) of failed variant processes" "$tmp/P.md" || fail "the report does not say what failed"
echo "allreduce_variants_test: ok"
