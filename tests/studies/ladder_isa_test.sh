#!/usr/bin/env bash
# The CPU ladder as an AVX2 machine runs it (ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN and trainlab's own
# loops): every rung that is not a GPU rung is measured, amp_bf16 included, and the bf16 rungs say
# they ran emulated (seed 000's negative result, a row in the table, never a failed one).
#
#   tests/studies/ladder_isa_test.sh BENCH_LADDER SOURCE_DIR [ISA]     (ISA: AVX2 unless given)
set -euo pipefail
ladder=$1
source_dir=$2
isa=${3:-AVX2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0
out=$(cd "$source_dir" && ONEDNN_MAX_CPU_ISA=$isa "$ladder" --device cpu --quick --repeats 1 \
        --ledger "$work/ledger.jsonl" --no-report 2>&1) || status=$?
if [ "$status" -ne 0 ]; then
  echo "$out"
  echo "FAIL: bench_ladder exited $status"
  exit 1
fi
echo "$out" | tail -n 20
python3 - "$work/ledger.jsonl" "$isa" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
rungs = {r["rung"]: r for r in rows if r.get("kind") == "rung" and not r.get("calibration")}
problems = []
for name, row in rungs.items():
    # ok, or skipped as the ladder file declares (a GPU rung: its reason is the file's); a rung the
    # planner refused ("... does not run on backend ...") or one that failed is a problem.
    if row["status"] == "ok":
        continue
    if row["status"] == "skipped" and "does not run on backend" not in row.get("reason", ""):
        continue
    problems.append(f"rung {name} is {row['status']}: {row.get('error') or row.get('reason')}")
amp = rungs.get("amp_bf16")
if amp is None or amp["status"] != "ok":
    problems.append("amp_bf16 was not measured")
elif sys.argv[2].upper() == "AVX2":
    if not amp.get("emulated"):
        problems.append("amp_bf16 ran under the AVX2 cap but its row does not say it was emulated")
    if amp.get("isa") != "avx2":
        problems.append(f"amp_bf16's row names ISA {amp.get('isa')!r}, not avx2")
if problems:
    print("\n".join("FAIL: " + p for p in problems))
    sys.exit(1)
measured = sorted(n for n, r in rungs.items() if r["status"] == "ok")
print(f"ladder_isa_test: ok ({len(measured)} rungs measured under ONEDNN_MAX_CPU_ISA={sys.argv[2]}: {', '.join(measured)})")
EOF
