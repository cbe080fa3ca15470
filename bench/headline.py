#!/usr/bin/env python3
"""`make headline`: every figure of the README's headline table measured again, in one run.

Runs, one after another on the build just made, each measurement the README's headline table
quotes, each interleaved with its peers inside its own tool, 3 rounds (or repeats or seeds):

    compare         bench/compare_torch.py, SmallCNN: f32 and bf16 training, forward only in both,
                    against every PyTorch variant (layouts, allocators, set_to_none, foreach,
                    frozen TorchScript, inference_mode), 3 rounds
    compare-resnet  the same for ResNet-20, 3 rounds
    ladder          bench_ladder --quick --calibrate, 3 repeats (each with its held-out accuracy)
    fashion         fashion_study: SmallCNN 3 epochs on Fashion-MNIST, 3 seeds, trainlab and PyTorch
    resnet          fashion_study --model resnet, SHORT FORM: 3 epochs, 1 seed, held to 90% (the full
                    run, `make resnet`: 10 epochs x 3 seeds to 93%, takes about 47 minutes here)
    scaling         bench_scaling at 4 ranks against PyTorch DDP, 3 repeats

Each step's rows go to the ledger as its tool writes them; this script then appends one
`headline_run` row naming every step (command, form, wall time, ok or failed with its last error
line, the run ids it wrote) and calls bench_report, which rewrites README.md's `headline` block and
docs/RESULTS.md's generated blocks from the ledger: the README quotes that one run only. A step
that fails stays in the table as a failed row; an interrupted run (Ctrl-C) records what ran and
rewrites nothing.

    python3 bench/headline.py --build build [--ledger L] [--only compare,ladder] [--rounds 3]

Nothing here is a test: every number comes from this run.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION_IDX = "/usr/share/datasets/fashion-mnist"


def steps(args):
    """(name, form, command) of every step, in order."""
    b = os.path.join(args.build, "bin")
    # Paths as given (relative to the repository, where every step runs) and python3 by name: the
    # commands are recorded and quoted in the README as a user would type them.
    ledger, out_dir = args.ledger, os.path.dirname(args.ledger) or "."
    py = "python3"
    fashion = ["--source", FASHION_IDX, "--data", os.path.join(args.build, "fashion-mnist"), "--ledger", ledger]
    r = str(args.rounds)
    return [
        ("compare", "full", [py, "bench/compare_torch.py", "--trainlab", f"{b}/trainlab", "--rounds", r,
                             "--ledger", ledger, "--out", os.path.join(out_dir, "compare_torch.json")]),
        ("compare-resnet", "full", [py, "bench/compare_torch.py", "--model", "resnet", "--trainlab", f"{b}/trainlab",
                                    "--rounds", r, "--ledger", ledger,
                                    "--out", os.path.join(out_dir, "compare_torch_resnet.json")]),
        ("ladder", "full", [f"{b}/bench_ladder", "--device", "cpu", "--quick", "--calibrate", "--repeats", r,
                            "--ledger", ledger, "--report", os.path.join(out_dir, "REPORT.md")]),
        ("fashion", "full", [f"{b}/fashion_study", "--seeds", r] + fashion),
        ("resnet", "short: 3 epochs, 1 seed, held to 90% (make resnet: 10 epochs x 3 seeds to 93%, 47 min)",
         [f"{b}/fashion_study", "--model", "resnet", "--seeds", "1", "--epochs", "3", "--batch", "128", "--lr", "0.1",
          "--momentum", "0.9", "--weight-decay", "5e-4", "--warmup-epochs", "0.5", "--layout", "nhwc", "--fuse",
          "--goal", "0.9"] + fashion),
        ("scaling", "full", ["scripts/mpirun", "-np", "4", f"{b}/bench_scaling", "--repeats", r, "--ledger", ledger]),
    ]


# docs/RESULTS.md's blocks the steps' full-form runs fill (the other blocks there come from other
# ledgers or runs and are left alone; the resnet block quotes make resnet's full run, which the
# short form here does not replace).
RESULTS_BLOCKS = {"native": "torch_ratios,compare_torch,compare_torch_headline,torch_ratios_resnet,compare_torch_resnet,"
                            "compare_torch_headline_resnet,ladder,fashion,scaling",
                  "avx2": "torch_ratios_avx2,compare_torch_avx2,compare_torch_headline_avx2"}


def run_ids(path):
    """Every run id the ledger holds (unreadable lines passed over: the report says them)."""
    ids = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("run_id"), str):
                    ids.add(row["run_id"])
    except FileNotFoundError:
        pass
    return ids


def run_step(name, form, command, ledger):
    """Runs one step, its output passed through; returns its record for the headline row."""
    print(f"\nheadline: step {name} ({form}): {' '.join(command)}", flush=True)
    before, start = run_ids(ledger), time.monotonic()
    tail = []
    try:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
    except OSError as e:
        return {"name": name, "command": " ".join(command), "form": form, "status": "failed",
                "error": f"cannot start: {e}", "wall_s": 0.0, "runs": []}
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail = (tail + [line.rstrip()])[-20:]
        status = proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
    record = {"name": name, "command": " ".join(command), "form": form, "status": "ok" if status == 0 else "failed",
              "error": "", "wall_s": round(time.monotonic() - start, 1),
              "runs": sorted(run_ids(ledger) - before)}
    if status != 0:
        said = [l for l in tail if l.strip()]
        record["error"] = f"exit {status}: " + (said[-1] if said else "no output")
    print(f"headline: step {name}: {record['status']} in {record['wall_s'] / 60:.1f} min, runs {record['runs']}",
          flush=True)
    return record


def git(*argv):
    try:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def capped_isa():
    """"avx2" under make headline CPU=avx2 (oneDNN capped), else "native"."""
    return "avx2" if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() == "AVX2" else "native"


def headline_row(records, started, command, run_id, isa, commit):
    return {"schema": 1, "kind": "headline_run", "run_id": run_id, "status": "ok",
            "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "device": {"name": cpu_name(), "type": "cpu"}, "host": platform.node(), "cores": os.cpu_count(),
            "threads": 2, "backend": "onednn", "timer": "each step's own",
            "isa": isa,  # "avx2" (make headline CPU=avx2): its own README block, headline_avx2
            "versions": {"engine": commit, "python": platform.python_version()},
            "date": started.strftime("%Y-%m-%d %H:%M UTC"), "commit": commit, "command": command,
            "steps": records}


def append(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--build", default="build", help="the build whose binaries measure (default build)")
    parser.add_argument("--ledger", default="results/ledger_cpu.jsonl", help="the ledger every step appends to")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, repeats and seeds of each step (default 3)")
    parser.add_argument("--only", default="", help="only these steps, comma-separated (the README then quotes "
                        "just them)")
    parser.add_argument("--readme", default="README.md", help="the file whose headline block is rewritten")
    parser.add_argument("--results", default="docs/RESULTS.md", help="the file whose generated blocks are rewritten")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 20:
        parser.error(f"--rounds {args.rounds}: allowed 1..20")
    plan = steps(args)
    names = [n for n, _, _ in plan]
    only = [s for s in args.only.split(",") if s]
    unknown = [s for s in only if s not in names]
    if unknown:
        parser.error(f"--only {','.join(unknown)}: no such step (the steps: {', '.join(names)})")
    for binary in ("trainlab", "bench_ladder", "fashion_study", "bench_scaling", "bench_report"):
        if not os.access(os.path.join(ROOT, args.build, "bin", binary), os.X_OK):
            parser.error(f"--build {args.build}: no {binary} there (make build first; make headline does)")
    os.makedirs(os.path.dirname(os.path.abspath(args.ledger)), exist_ok=True)

    started = datetime.datetime.now(datetime.timezone.utc)
    commit = git("describe", "--always", "--dirty")  # the tree as built, before any step writes
    run_id = started.strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    command = "make headline" + (f" LEDGER={args.ledger}" if args.ledger != "results/ledger_cpu.jsonl" else "") + \
        (f" ONLY={args.only}" if only else "")
    records = []
    try:
        for name, form, cmd in plan:
            if not only or name in only:
                records.append(run_step(name, form, cmd, args.ledger))
    except KeyboardInterrupt:
        records.append({"name": "(interrupted)", "command": command, "form": "", "status": "failed",
                        "error": "interrupted by the user", "wall_s": 0.0, "runs": []})
        append(args.ledger, headline_row(records, started, command, run_id, capped_isa(), commit))
        print(f"\nheadline: interrupted; the steps that ran are in {args.ledger} (run {run_id}); "
              f"{args.readme} and {args.results} left as they were", file=sys.stderr)
        return 130
    append(args.ledger, headline_row(records, started, command, run_id, capped_isa(), commit))
    report = os.path.join(os.path.dirname(args.ledger) or ".", "REPORT.md")
    base = [os.path.join(args.build, "bin", "bench_report"), "--ledger", args.ledger, "--out", report]
    marker = "headline_avx2" if capped_isa() == "avx2" else "headline"
    status = subprocess.call(base + ["--readme", args.readme, "--blocks", marker], cwd=ROOT)
    if status == 0 and os.path.exists(os.path.join(ROOT, args.results)):
        status = subprocess.call(base + ["--readme", args.results, "--blocks", RESULTS_BLOCKS[capped_isa()]],
                                 cwd=ROOT)
    failed = [r["name"] for r in records if r["status"] != "ok"]
    total = sum(r["wall_s"] for r in records) / 60
    print(f"\nheadline: run {run_id}: {len(records)} steps in {total:.0f} min"
          + (f"; FAILED: {', '.join(failed)}" if failed else "") + f"; {args.readme} rewritten from {args.ledger}")
    return 1 if failed or status != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
