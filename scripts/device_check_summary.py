#!/usr/bin/env python3
"""The device check's summary (scripts/device-check.sh), from whatever its stages have left so far.

Run after every stage, so that a check cut short still brings back what it found: the GPU, each
stage's outcome and time, where cuDNN and NCCL came from, the GPU tests' verdict, the ring against
ncclAllReduce, trainlab against PyTorch eager (the best variant per dtype, compare_torch's rule:
best by median, ties to the higher minimum, then the peer's order), and the tails of the optional
ladder and cost stages. Missing pieces say so; nothing here fails.

    scripts/device_check_summary.py WORK_DIR > summary.txt
"""
import json
import os
import re
import statistics
import sys


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def jsonl(path):
    rows = []
    for line in read(path).splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def trainlab_rate(path):
    rows = jsonl(path)
    values = [r["samples_per_s"] for r in rows if "samples_per_s" in r]
    if values:
        return statistics.median(values), ""
    return None, "missing" if not os.path.exists(path) else "no result"


def torch_best(path):
    """The best PyTorch variant by median (ties: the higher minimum, then the peer's order)."""
    by = {}
    errors = []
    for row in jsonl(path):
        if "error" in row:
            errors.append(str(row["error"]))
        for variant, result in row.get("variants", {}).items():
            by.setdefault(variant, [])
            if "samples_per_s" in result:
                by[variant].append(result["samples_per_s"])
    ranked = [(statistics.median(v), min(v), -i, name) for i, (name, v) in enumerate(by.items()) if v]
    if not ranked:
        return None, (errors[0] if errors else ("missing" if not os.path.exists(path) else "no variant ran"))
    best = max(ranked)
    return best[0], best[3]


def main():
    work = sys.argv[1]
    out = ["# trainlab device check", ""]
    gpu = read(os.path.join(work, "gpu.txt")).strip()
    out += ["## Machine", "", "```", gpu or "(nvidia-smi gave nothing)", "```", ""]
    out += ["## Stages", "", "```", read(os.path.join(work, "stages.txt")).strip(), "```", ""]

    tests = read(os.path.join(work, "gpu-tests.log"))
    if tests:
        verdict = [l for l in tests.splitlines() if re.search(r"tests passed|tests failed|\(Failed\)|\(Skipped\)|"
                                                               r"\*\*\*|Passed|SKIPPED", l)]
        out += ["## GPU tests (ctest -L gpu)", "", "```"] + verdict[-20:] + ["```", ""]

    nccl = read(os.path.join(work, "nccl.log"))
    if nccl:
        lines = [l for l in nccl.splitlines() if re.match(r"^ *[0-9.]+[KMG]? ", l) or "correct" in l or
                 "target" in l or "error" in l.lower()]
        out += ["## The ring against ncclAllReduce (bench_allreduce --comm nccl)", "", "```"] + lines[-20:] + \
               ["```", ""]

    table = []
    for label, ours_file, dtype in (("f32", "trainlab_f32", "f32"), ("bf16 (target >= 1.0x)", "trainlab_bf16", "bf16"),
                                     ("bf16, fused + CUDA graphs (stretch 1.5x)", "trainlab_bf16_graph", "bf16")):
        ours, why_ours = trainlab_rate(os.path.join(work, f"{ours_file}.jsonl"))
        theirs, variant = torch_best(os.path.join(work, f"torch_{dtype}.jsonl"))
        ratio = f"{ours / theirs:.2f}x" if ours and theirs else "n/a"
        shown_ours = f"{ours:.1f}" if ours else why_ours
        shown_theirs = f"{theirs:.1f} ({variant})" if theirs else variant
        table.append(f"| {label} | {shown_ours} | {shown_theirs} | {ratio} |")
    if any(os.path.exists(os.path.join(work, f)) for f in ("trainlab_f32.jsonl", "torch_f32.jsonl")):
        out += ["## trainlab against PyTorch eager (SmallCNN, batch 256, one round)", "",
                "| configuration | trainlab samples/s | PyTorch eager samples/s (best variant) | ratio |",
                "|---|---|---|---|"] + table + [""]

    for name, title in (("ladder", "CUDA ladder (quick, 1 repeat)"), ("cost", "cost to accuracy (quick)"),
                        ("routes", "seed 004's routes with via_host (bench_allreduce --routes --routes-device cuda)")):
        text = read(os.path.join(work, f"{name}.log"))
        if text:
            out += [f"## {title}", "", "```"] + text.splitlines()[-24:] + ["```", ""]
    backends = read(os.path.join(work, "backends.txt")).strip()
    if backends:
        out += ["## The build runs (trainlab backends --ops, two MPI ranks)", "", "```", backends, "```", ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
