#!/usr/bin/env python3
"""trainlab's hand-written all-reduces against the strongest MPI, per size, in one run.

    bench/allreduce_variants.py --np 2 --sizes 4K,64K,1M,16M,64M,256M --rounds 3 \
        --ledger bench/results/amd_epyc/ledger_cpu.jsonl

Open MPI fixes its all-reduce algorithm and glibc its malloc behaviour when a process starts, so
each MPI variant is a process of its own: `scripts/mpirun -np P build/bin/bench_allreduce` under
OMPI_MCA_coll_tuned_use_dynamic_rules=1 and OMPI_MCA_coll_tuned_allreduce_algorithm=N (N = 0 is
Open MPI's own decision), with glibc's default malloc or with its mmap and trim thresholds raised
(GLIBC_TUNABLES, as the PyTorch peers run: Open MPI's large all-reduces allocate a temporary the size
of the message on every call, and glibc's default hands each one fresh pages). Every process times
trainlab's all-reduces (the ring, recursive doubling, halving-doubling, single-copy: --hand-written) beside MPI's
under its own malloc, and writes its rows into one run (--run-id)
with its round. Rounds interleave the variants (A B C ... A B C ..., the order rotated each round).
bench_report draws the run: per size, the variant with the lowest median is the peer, named.

A variant whose process fails is a `failed` row per size in the ledger (with its exit status and
the last line it printed), never a silent gap; the exit status is 1 then.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from peer_malloc import TUNABLES  # noqa: E402  (the PyTorch peers' tuned malloc, the same setting)

# Open MPI 4.1's coll_tuned_allreduce_algorithm values.
ALGORITHMS = {"decision": 0, "basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
              "segmented_ring": 5, "rabenseifner": 6}
MALLOCS = ("default", "tuned")
HAND_WRITTEN = ("ring", "recursive_doubling", "halving_doubling", "single_copy")


def names(text, allowed, what):
    out = [x for x in text.split(",") if x]
    bad = [x for x in out if x not in allowed]
    if bad or not out:
        raise SystemExit(f"allreduce_variants: error: --{what} {text!r}: {', '.join(bad) or 'empty'} is not one of "
                         f"{', '.join(allowed)}")
    return out


def variant_env(algorithm, malloc):
    env = dict(os.environ)
    for key in ("OMPI_MCA_coll_tuned_use_dynamic_rules", "OMPI_MCA_coll_tuned_allreduce_algorithm"):
        env.pop(key, None)
    if algorithm != "decision":
        env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
        env["OMPI_MCA_coll_tuned_allreduce_algorithm"] = str(ALGORITHMS[algorithm])
    tunables = [x for x in env.get("GLIBC_TUNABLES", "").split(":") if x and not x.startswith("glibc.malloc.")]
    if malloc == "tuned":
        tunables.append(TUNABLES)
    if tunables:
        env["GLIBC_TUNABLES"] = ":".join(tunables)
    else:
        env.pop("GLIBC_TUNABLES", None)
    return env


def failed_rows(template, algorithm, malloc, sizes, round_, run_id, error):
    """A failed row per size for a variant whose process did not finish, shaped like its ok rows."""
    rows = []
    for size in sizes:
        row = {k: v for k, v in template.items()
               if k not in ("repeats", "stats", "algbw_gbps", "busbw_gbps", "correct", "noise_floor_percent", "time")}
        row.update({"status": "failed", "run_id": run_id, "round": round_, "error": error,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        row["config"] = dict(template["config"], bytes=size, algorithm="native", mpi_algorithm=algorithm,
                             malloc=malloc)
        row["config"].pop("count", None)
        rows.append(row)
    return rows


def check_ledger(path):
    """Why `path` cannot be a ledger to append to ("" when it can), as bench_allreduce's own check says
    it: nothing yet, or a regular file whose first line is a ledger row (a JSON object with "schema")."""
    if not os.path.lexists(path):
        return ""
    if not os.path.isfile(path):
        return "not a regular file (a ledger is a regular file, appended to and read back)"
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16)
    except OSError as error:
        return f"cannot be read: {error.strerror}"
    if not first:
        return ""
    if not first.endswith(b"\n"):
        return "" if first.startswith(b"{") else "not a ledger: its first line is not a ledger row"
    try:
        row = json.loads(first)
    except ValueError:
        row = None
    if not isinstance(row, dict) or "schema" not in row:
        return "not a ledger: its first line is not a ledger row (a JSON object with \"schema\")"
    return ""


def run_rows(path, run_id):
    """The run's all-reduce rows in the ledger (lines that do not parse are left to bench_report)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("run_id") == run_id and row.get("kind") == "allreduce":
                rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks (2 and up)")
    parser.add_argument("--sizes", default="4K,64K,1M,16M,64M,256M", help="bytes per rank, bench_allreduce's --sizes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each every variant once")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="Open MPI's algorithms to run")
    parser.add_argument("--malloc", default=",".join(MALLOCS), help="default, tuned or both")
    parser.add_argument("--hand-written", default=",".join(HAND_WRITTEN),
                        help="trainlab's all-reduces every process times beside MPI's")
    parser.add_argument("--seconds-per-size", default="0.2", help="bench_allreduce's budget per arm and size")
    parser.add_argument("--mca", action="append", default=[], metavar="KEY=VALUE",
                        help="more Open MPI parameters for every process (btl=tcp,self for TCP alone)")
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "bench_allreduce"))
    parser.add_argument("--ledger", default="", help="the ledger the processes append to (required)")
    args = parser.parse_args()
    if args.np < 2:
        raise SystemExit(f"allreduce_variants: error: --np {args.np}: an all-reduce needs 2 ranks or more")
    if args.rounds < 1:
        raise SystemExit(f"allreduce_variants: error: --rounds {args.rounds}: at least 1")
    if not args.ledger:
        raise SystemExit("allreduce_variants: error: --ledger is required (the run's rows are the result)")
    ledger_problem = check_ledger(args.ledger)
    if ledger_problem:
        raise SystemExit(f"allreduce_variants: error: --ledger {args.ledger!r}: {ledger_problem}")
    if not os.access(args.bench, os.X_OK):
        raise SystemExit(f"allreduce_variants: error: {args.bench} is not an executable (make build first)")
    for kv in args.mca:
        if "=" not in kv:
            raise SystemExit(f"allreduce_variants: error: --mca {kv!r}: write KEY=VALUE (btl=tcp,self)")
    algorithms = names(args.algorithms, ALGORITHMS, "algorithms")
    mallocs = names(args.malloc, MALLOCS, "malloc")
    hand = names(args.hand_written, HAND_WRITTEN, "hand-written")
    variants = [(a, m) for a in algorithms for m in mallocs]
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    mca = [x for kv in args.mca for x in ("--mca",) + tuple(kv.split("=", 1))]
    print(f"# allreduce_variants: {len(variants)} MPI variants x {args.rounds} rounds at {args.np} ranks, "
          f"sizes {args.sizes}; run {run_id}; ledger {args.ledger}", flush=True)
    failures = []
    started = time.time()
    for round_ in range(1, args.rounds + 1):
        shift = (round_ - 1) % len(variants)
        for algorithm, malloc in variants[shift:] + variants[:shift]:
            cmd = [os.path.join(ROOT, "scripts", "mpirun"), "-np", str(args.np), *mca, args.bench,
                   "--sizes", args.sizes, "--algorithms", ",".join(hand), "--seconds-per-size", args.seconds_per_size,
                   "--run-id", run_id,
                   "--round", str(round_), "--ledger", args.ledger]
            t0 = time.time()
            proc = subprocess.run(cmd, env=variant_env(algorithm, malloc), capture_output=True, text=True)
            lines = [x.strip() for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
            # Why: the tool's own "error:" line, else the first line Open MPI's help text printed.
            own = [x for x in lines if "error:" in x]
            said = [x for x in lines if not x.startswith("---")]
            tail = own[-1] if own else (said or ["(no output)"])[0]
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}): {tail}"
            print(f"round {round_}/{args.rounds}  mpi {algorithm:<18} malloc {malloc:<7} {time.time() - t0:6.1f} s  "
                  f"{status}", flush=True)
            if proc.returncode != 0:
                failures.append((round_, algorithm, malloc, f"exit {proc.returncode}: {tail}"))
    # Failed variants: rows shaped like the run's ok rows (their environment), one per size.
    if failures:
        ok = [r for r in run_rows(args.ledger, run_id) if r.get("status") == "ok"]
        if not ok:
            print("allreduce_variants: error: every variant failed; nothing was measured", file=sys.stderr)
            return 1
        template, sizes = ok[0], sorted({r["config"]["bytes"] for r in ok})
        with open(args.ledger, "a") as f:
            for round_, algorithm, malloc, error in failures:
                for row in failed_rows(template, algorithm, malloc, sizes, round_, run_id, error):
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")
    print(f"# {len(variants) * args.rounds - len(failures)} of {len(variants) * args.rounds} processes ok in "
          f"{time.time() - started:.0f} s; run {run_id} in {args.ledger} (bench_report draws it)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
