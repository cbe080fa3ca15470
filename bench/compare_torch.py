#!/usr/bin/env python3
"""trainlab against PyTorch on this machine: a model's training (and inference) throughput, side by side.

Every configuration runs as its own process (so peak RSS is its own), all configurations in turn
within each round (A B C ... A B C ...) so that drift hits them alike, for --rounds rounds. Each
round also measures the GEMM ceiling (oneDNN f32 and bf16, 2048^3, through `trainlab gemm`).
Reported per row: median and min-max over rounds; ratios are per round against the best PyTorch
variant for that dtype (chosen by its median), then summarised the same way.

    python3 bench/compare_torch.py [--rounds 5] [--seconds 3] [--batch 128] [--threads 2]
                                   [--ledger L] [--out bench/results/compare_torch.json]
    python3 bench/compare_torch.py --render-only   # the tables again, from the JSON
    python3 bench/compare_torch.py --ab OLD/bin/trainlab [--rounds 5]   # this build against another, no peer
    python3 bench/compare_torch.py --model resnet [...]   # another model with a PyTorch twin (PEERS)

With --ledger the run is appended as rows (a compare_torch row per trainlab configuration, a
compare_torch_peer row per PyTorch variant, a compare_torch_run row), from which bench_report draws
its section and, with --readme docs/RESULTS.md, the comparison's blocks there (`make compare` does
both): bench_report is the one writer of docs/RESULTS.md's generated blocks.

PyTorch runs under /usr/bin/python3 (Debian's python3-torch); the script itself needs only the
standard library. Nothing here is a test: it is a measurement, and every number it prints comes
from this run.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINLAB = os.path.join(ROOT, "build", "bin", "trainlab")
# The model compared (--model) and its PyTorch twin: the peer script, its title in tables.
PEERS = {"smallcnn": ("torch_smallcnn.py", "SmallCNN"), "resnet": ("torch_resnet.py", "ResNet-20"),
         "gpt": ("torch_gpt.py", "GPT 4x4x128, context 64")}
# Models with no 4-D op: no memory layout to choose, so no nhwc arms (a GPT's samples are windows of
# token ids; its rows are samples/s = windows/s, tokens/s = 64 x that at the default context).
NO_LAYOUT = ("gpt",)
MODEL = "smallcnn"
PEER = os.path.join(ROOT, "bench", "peers", PEERS[MODEL][0])
TORCH_PYTHON = "/usr/bin/python3"
# The PyTorch variants come from the peer itself (torch_smallcnn.py --list-variants): every variant
# it defines is measured, training and forward only, and the best per dtype in this run is the peer.


def best_variant(order, samples):
    """The best of the variants in `order` by their values in `samples` (name -> list): the highest
    median wins; an exact tie goes to the higher minimum (the steadier), then to the earlier name in
    `order` (the peer lists its variants simplest first). Variants without values are passed over.
    The same rule as bench::best_by_median (bench_scaling's DDP peer)."""
    best = None
    for name in order:
        values = samples.get(name) or []
        if not values:
            continue
        key = (statistics.median(values), min(values))
        if best is None or key > best[1]:
            best = (name, key)
    if best is None:
        raise ValueError("best_variant: no variant has a measurement")
    return best[0]


def peer_variants():
    """{"train": [...], "infer": [...]} from the peer."""
    result = subprocess.run([TORCH_PYTHON, PEER, "--list-variants"], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"compare_torch: {PEER} --list-variants failed: {result.stderr.strip() or result.stdout.strip()}")
    return json.loads(result.stdout)


def trainlab_configs(threads, capped=False):
    """(key, label, kind, argv) of every trainlab configuration measured; kind picks the peer.
    An argv may start with VAR=value environment settings. `capped`: the whole run is held to an ISA
    by ONEDNN_MAX_CPU_ISA (make compare CPU=avx2), so the arm that caps bf16 below its native ISA
    (by setting that variable itself, which would lift the run's cap) is left out."""
    def tl(key, label, kind, *flags, threads_override=None, env=()):
        dtype = "bf16" if kind.startswith("bf16") else "f32"  # bf16_infer is bf16 too
        model = [] if MODEL == "smallcnn" else ["--model", MODEL]
        if MODEL in NO_LAYOUT:
            label = label.replace(" nhwc", "")
            flags = tuple(f for i, f in enumerate(flags) if f != "--layout" and (i == 0 or flags[i - 1] != "--layout"))
        return (key, label, kind,
                [*env, "throughput", *model, "--dtype", dtype, "--threads", str(threads_override or threads), *flags])
    arms = [
        tl("tl_onednn_f32", "onednn f32 nchw", "f32", "--backend", "onednn"),
        tl("tl_onednn_f32_nhwc", "onednn f32 nhwc", "f32", "--backend", "onednn", "--layout", "nhwc"),
        tl("tl_onednn_f32_best", "onednn f32 nhwc fused", "f32", "--backend", "onednn", "--layout", "nhwc", "--fuse"),
        tl("tl_onednn_f32_best_1t", "onednn f32 nhwc fused, 1 thread", "f32", "--backend", "onednn", "--layout", "nhwc",
           "--fuse", threads_override=1),
        tl("tl_eigen_f32", "eigen f32 nchw", "f32", "--backend", "eigen"),
        tl("tl_onednn_bf16", "onednn bf16 nchw", "bf16", "--backend", "onednn"),
        tl("tl_onednn_bf16_best", "onednn bf16 nhwc fused", "bf16", "--backend", "onednn", "--layout", "nhwc", "--fuse"),
        *([] if capped else [
            # What bf16 costs on a CPU without native bf16: oneDNN held to plain AVX-512 (its fallback).
            tl("tl_onednn_bf16_no_native", "onednn bf16 nhwc fused, ISA capped at avx512_core", "bf16", "--backend",
               "onednn", "--layout", "nhwc", "--fuse", env=("ONEDNN_MAX_CPU_ISA=AVX512_CORE",))]),
        tl("tl_onednn_f32_infer", "onednn f32 nhwc fused, forward only", "f32_infer", "--backend", "onednn", "--layout",
           "nhwc", "--fuse", "--forward-only"),
        tl("tl_onednn_bf16_infer", "onednn bf16 nhwc fused, forward only", "bf16_infer", "--backend", "onednn",
           "--layout", "nhwc", "--fuse", "--forward-only"),
    ]
    # Without a layout the nhwc arm is the plain one again: measured once.
    return [arm for arm in arms if not (MODEL in NO_LAYOUT and arm[0] == "tl_onednn_f32_nhwc")]


# The kinds compared: (kind, dtype, the peer's extra flags); each trainlab configuration is held to
# the best PyTorch variant of its own kind.
KINDS = (("f32", "f32", []), ("bf16", "bf16", []), ("f32_infer", "f32", ["--forward-only"]),
         ("bf16_infer", "bf16", ["--forward-only"]))


def torch_configs(threads, variants):
    out = []
    for kind, dtype, extra in KINDS:
        for variant in variants["infer" if extra else "train"]:
            out.append((f"torch_{kind}_{variant}", f"torch {dtype} {variant}" + (" forward only" if extra else ""), kind,
                        ["--variant", variant, "--dtype", dtype, "--threads", str(threads), *extra]))
    return out


def run_json(argv):
    env = dict(os.environ)
    while argv and "=" in argv[0] and not argv[0].startswith("/"):
        name, value = argv[0].split("=", 1)
        env[name] = value
        argv = argv[1:]
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
    return json.loads(lines[-1])


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(s, digits=0):
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


def render(doc):
    """The full table and the headline (both in docs/RESULTS.md), from a run's JSON alone."""
    machine, engine, rows = doc["machine"], doc["engine"], doc["rows"]
    gflops = doc["gemm_gflop_per_s"]
    rounds, seconds = machine.get("rounds", rows[0]["samples_per_s"]["n"]), machine.get("seconds", "?")
    lines = [
        f"Measured {machine['date']} by `{doc.get('command') or f'python3 bench/compare_torch.py --rounds {rounds} --seconds {seconds}'}`"
        f"{' (run `' + doc['run_id'] + '`)' if doc.get('run_id') else ''} "
        f"on {machine['cpu']}, {machine['threads']} threads, batch {machine['batch']}; trainlab {engine['engine']} "
        f"({engine['backend'].split(' (')[0]}), PyTorch {machine['torch']}. Median (min-max) of {rounds} "
        f"interleaved rounds; ratios are per round against the best PyTorch variant of the same dtype.",
        "",
        f"GEMM ceiling (oneDNN, 2048^3): f32 {fmt(summary(gflops['f32']))} GFLOP/s, "
        f"bf16 {fmt(summary(gflops['bf16']))} GFLOP/s.",
        "",
        "| trainlab config | samples/s | best PyTorch (variant) | samples/s | ratio | GFLOP/s (of ceiling) | peak RSS MB (PyTorch) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['config']} | {fmt(row['samples_per_s'])} | {row['peer']} | {fmt(row['peer_samples_per_s'])} "
                     f"| {fmt(row['ratio'], 2)}x | {row['gflop_per_s']['median']:.0f} "
                     f"({100 * row['ceiling_share']['median']:.0f}%) | {row['rss_mb']['median']:.0f} "
                     f"({row['peer_rss_mb']['median']:.0f}) |")
    if doc.get("variants"):
        lines += ["", "Every PyTorch variant measured in this run (the best per dtype, marked, is the peer above; "
                      f"`bench/peers/{PEERS[doc.get('model', 'smallcnn')][0]} --help` says what each is):", "",
                  "| kind | PyTorch variant | samples/s | |", "|---|---|---|---|"]
        for v in doc["variants"]:
            lines.append(f"| {v['kind']} | {v['variant']} | {fmt(v['samples_per_s'])} | {'best' if v['best'] else ''} |")
    lines += ["", "| target | measured (median, min-max) | verdict |", "|---|---|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['target']} | {fmt(t['value'], 2)} | {t['verdict']} |")
    by_config = {row["config"]: row for row in rows}
    headline = [
        f"{PEERS[doc.get('model', 'smallcnn')][1]} training, batch {machine['batch']}, {machine['threads']} threads, "
        f"on {machine['cpu']} "
        f"({machine['date'][:10]}; median of {rounds} interleaved rounds, `make compare`; every "
        f"configuration: [docs/RESULTS.md](docs/RESULTS.md#against-pytorch)):",
        "",
        "| trainlab | samples/s | best PyTorch variant | samples/s | ratio |",
        "|---|---|---|---|---|",
    ]
    layout = "" if doc.get("model", "smallcnn") in NO_LAYOUT else " nhwc"
    for config in (f"onednn f32{layout} fused", f"onednn bf16{layout} fused", f"onednn f32{layout} fused, forward only",
                   f"onednn bf16{layout} fused, forward only"):
        if config in by_config:
            row = by_config[config]
            headline.append(f"| {config} | {fmt(row['samples_per_s'])} | {row['peer']} | "
                            f"{fmt(row['peer_samples_per_s'])} | {fmt(row['ratio'], 2)}x |")
    return "\n".join(lines), "\n".join(headline)


# Issue 28's targets, by the ISA family trainlab ran with (the throughput rows' "isa"): the best
# trainlab configuration of each dtype against the best PyTorch variant of the same dtype, per round;
# the forward-only configuration against PyTorch's best inference variant (frozen TorchScript);
# the best f32 configuration's GFLOP/s against the same round's GEMM ceiling.
TARGETS = {
    "avx512": {"f32": 1.5, "bf16": 1.5, "f32_infer": 1.2, "bf16_infer": 1.2, "ceiling": 0.75},
    "avx2": {"f32": 1.4, "bf16": 3.0, "f32_infer": 1.2, "bf16_infer": None, "ceiling": 0.60},
}
# Issue 45's, for ResNet-20 (the same on both ISA families; no ceiling target).
RESNET_TARGETS = {"f32": 1.3, "bf16": 1.3, "f32_infer": 1.2, "bf16_infer": None, "ceiling": None}
# Issue 46's, for the GPT (tokens/s, training only).
GPT_TARGETS = {"f32": 1.3, "bf16": 1.3, "f32_infer": None, "bf16_infer": None, "ceiling": None}
# Arms that show a handicap on purpose, never a contender for "the best trainlab configuration".
NOT_CONTENDING = ("tl_onednn_f32_best_1t", "tl_onednn_bf16_no_native")


def isa_family(isa):
    """"avx512" for oneDNN's avx512_* ISAs, "avx2" for avx2 and avx2_vnni, None below (no targets)."""
    return "avx512" if isa.startswith("avx512") else "avx2" if isa.startswith("avx2") else None


def issue_targets(isa, samples, best, rows, ratio):
    """(name, value summary, at_least, at_most) of each of the ISA's targets; rows: trainlab key -> its
    row (samples_per_s, ceiling_share); ratio(a, b): the per-round ratio summary of two keys."""
    family = isa_family(isa)
    if family is None:
        return []
    goal = {"resnet": RESNET_TARGETS, "gpt": GPT_TARGETS}.get(MODEL, TARGETS[family])
    out = []
    for kind, what in (("f32", "f32 training"), ("bf16", "bf16 training"), ("f32_infer", "forward only (f32)"),
                       ("bf16_infer", "forward only (bf16)")):
        keys = [k for k, row in rows.items() if row["kind"] == kind and k not in NOT_CONTENDING]
        if not keys or kind not in best:
            continue
        ours = best_variant(keys, samples)
        bar = f">= {goal[kind]}x" if goal[kind] is not None else "(no target)"
        out.append((f"{family} ({isa}): {what}, best trainlab ({rows[ours]['config']}) {bar} "
                    f"best PyTorch {kind}", ratio(ours, best[kind]), goal[kind], None))
        if kind == "f32" and goal["ceiling"] is not None:
            out.append((f"{family} ({isa}): f32 step / GEMM ceiling ({rows[ours]['config']}) >= "
                        f"{goal['ceiling']:.0%}", rows[ours]["ceiling_share"], goal["ceiling"], None))
    return out


def target_verdict(value, at_least, at_most):
    """A target's verdict from its per-round summary: "met" only when every round clears the bar,
    "MISSED" when none does, and "not separable" (with the median's side) when the rounds' range
    crosses it (issue 50: a range across the target is never called met). at_most with at_least is a
    stretch goal, judged by the median."""
    if at_least is None and at_most is None:
        return "reported"
    if at_least is not None:
        if value["min"] >= at_least:
            verdict = "met"
        elif value["max"] < at_least:
            verdict = "MISSED"
        else:
            verdict = "not separable (median " + ("above" if value["median"] >= at_least else "below") + ")"
        stretch = f"; stretch {'met' if value['median'] >= at_most else 'missed'}" if at_most else ""
        return verdict + stretch
    if value["max"] <= at_most:
        return "met"
    if value["min"] > at_most:
        return "MISSED"
    return "not separable (median " + ("below" if value["median"] <= at_most else "above") + ")"


HEADLINE_KEYS = ("tl_onednn_f32_best", "tl_onednn_bf16_best", "tl_onednn_f32_infer", "tl_onednn_bf16_infer")


def verify_verdicts(recorded, rerun):
    """recorded, rerun: {trainlab key: [per-round ratio, ...]}. Within when the re-run's median ratio
    lies inside the recorded per-round ratios' min-max (a ratio to the peer measured in the same
    rounds, so another machine scales both alike; there is no calibration arm to widen it by)."""
    out = []
    for key, ratios in rerun.items():
        lo, hi = min(recorded[key]), max(recorded[key])
        median = statistics.median(ratios)
        if lo <= median <= hi:
            where = "within"
        else:
            off = (median / lo - 1) * 100 if median < lo else (median / hi - 1) * 100
            where = f"OUTSIDE ({off:+.1f}% {'below' if off < 0 else 'beyond'} the recorded range)"
        out.append({"key": key, "recorded": summary(recorded[key]), "rerun": summary(ratios), "within": lo <= median <= hi,
                    "verdict": where})
    return out


def verify(doc, sample, rounds, runner):
    """Re-runs `sample` of the run's headline trainlab configurations and each one's recorded peer
    variant, interleaved for `rounds` rounds (runner(argv) -> samples/s), and judges each ratio."""
    # The variants the run measured (recorded since peer_variants was; earlier runs: from the labels).
    variants = doc.get("peer_variants") or {
        "train": [r["variant"].split(" ", 2)[2] for r in doc["variants"] if r["kind"] == "f32"],
        "infer": [r["variant"].split(" ", 2)[2].removesuffix(" forward only")
                  for r in doc["variants"] if r["kind"] == "f32_infer"]}
    configs = {key: (label, kind, argv) for key, label, kind, argv in
               trainlab_configs(doc["machine"]["threads"]) + torch_configs(doc["machine"]["threads"], variants)}
    by_label = {label: key for key, (label, _, _) in configs.items()}
    rows = {by_label[r["config"]]: r for r in doc["rows"] if r["config"] in by_label}
    keys = [k for k in HEADLINE_KEYS if k in rows][:sample]
    common = ["--batch", str(doc["machine"]["batch"]), "--seconds", str(doc["machine"]["seconds"])]
    rerun = {k: [] for k in keys}
    for r in range(rounds):
        for key in keys:
            peer = by_label[rows[key]["peer"]]
            ours = runner(command_for(key, configs[key][2], common))
            theirs = runner(command_for(peer, configs[peer][2], common))
            rerun[key].append(ours / theirs)
            print(f"verify round {r + 1}/{rounds}  {configs[key][0]:42s} {ours:9.1f} samples/s against "
                  f"{rows[key]['peer']}: {theirs:9.1f} ({ours / theirs:.3f}x)", flush=True)
    recorded = {k: rows[k]["ratio_per_round"] for k in keys}
    return [dict(v, config=configs[v["key"]][0], peer=rows[v["key"]]["peer"])
            for v in verify_verdicts(recorded, rerun)]


def command_for(key, argv, common):
    if key.startswith("tl_"):
        env = [a for a in argv if "=" in a and not a.startswith("-")][:1]
        return [*env, TRAINLAB, *argv[len(env):], *common]
    return [TORCH_PYTHON, PEER, *argv, *common]


def ab_builds(baseline, rounds, threads, common):
    """This build against another trainlab build (`baseline`: its binary; its libtrainlab beside it in
    ../lib), the headline configurations only, interleaved within each round (the order of the arms
    turning from round to round): this build twice (the calibration pair, whose gap is the noise
    floor) and the baseline. A change is within its noise
    floor when |effect| of the medians is at most the floor (the larger of the pair's two gaps: the
    medians' and the per-round maximum)."""
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(baseline))), "lib")
    arms = (("new", TRAINLAB, ()), ("new again", TRAINLAB, ()), ("baseline", baseline, (f"LD_LIBRARY_PATH={lib}",)))
    configs = [c for c in trainlab_configs(threads) if c[0] in HEADLINE_KEYS]
    samples = {(key, arm): [] for key, *_ in configs for arm, *_ in arms}
    for r in range(rounds):
        for key, label, kind, argv in configs:
            # The arms' order turns each round, so that none always runs first (or after the same one).
            for arm, binary, env in arms[r % len(arms):] + arms[:r % len(arms)]:
                result = run_json([*env, binary, *argv, *common])
                samples[(key, arm)].append(result["samples_per_s"])
                print(f"round {r + 1}/{rounds}  {label:34s} {arm:10s} {result['samples_per_s']:10.1f} samples/s",
                      flush=True)
    print(f"\nthis build ({TRAINLAB}) against the baseline ({baseline}), {rounds} interleaved rounds, samples/s "
          "median (min-max); noise floor: this build against itself in the same rounds")
    print("| configuration | this build | again (calibration) | baseline | this vs baseline | noise floor | verdict |")
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    for key, label, kind, argv in configs:
        new, again, base = (samples[(key, arm)] for arm in ("new", "new again", "baseline"))
        effect = (statistics.median(new) / statistics.median(base) - 1) * 100
        floor = max(abs(statistics.median(new) / statistics.median(again) - 1),
                    max(abs(a / b - 1) for a, b in zip(new, again))) * 100
        within = abs(effect) <= floor
        verdicts.append(within)
        print(f"| {label} | {fmt(summary(new))} | {fmt(summary(again))} | {fmt(summary(base))} | {effect:+.1f}% | "
              f"{floor:.1f}% | {'within the noise floor' if within else 'OUTSIDE the noise floor'} |")
    print(f"\n{sum(verdicts)} of {len(verdicts)} configurations within their noise floor")
    return 0


class OneLineParser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2, as for every trainlab tool (not a usage dump)."""

    def error(self, message):
        self.exit(2, f"compare_torch: error: {message} (see --help)\n")


def load_run(parser, path):
    """--out's JSON for --render-only and --verify: a regular file holding one recorded run (an object
    with its rows, machine and engine), or one line naming the file and what is wrong."""
    if not os.path.isfile(path):
        parser.error(f"--out {path!r} is not a regular file holding a recorded run "
                     f"({'missing' if not os.path.exists(path) else 'a directory or device'}); run make compare first")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as error:
        parser.error(f"--out {path!r} is not a recorded run: {str(error).splitlines()[0]}")
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows) \
            or not isinstance(doc.get("machine"), dict) or not isinstance(doc.get("engine"), dict):
        parser.error(f"--out {path!r} is not a recorded run (an object with rows, machine and engine); "
                     "run make compare first")
    return doc


def main():
    global TRAINLAB, MODEL, PEER
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smallcnn", choices=sorted(PEERS),
                        help="the model compared: a registered model with a PyTorch twin in bench/peers/")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per configuration and round")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="",
                        help="the run's JSON (default bench/results/compare_torch.json, _MODEL.json for another model)")
    parser.add_argument("--trainlab", default=TRAINLAB,
                        help="the trainlab binary (make compare CPU=avx2 passes the portable build's)")
    parser.add_argument("--ledger", default="",
                        help="also append the run to this ledger (a compare_torch row per trainlab configuration, a "
                             "compare_torch_peer row per PyTorch variant), which bench_report draws")
    parser.add_argument("--render-only", action="store_true",
                        help="measure nothing: print the tables from --out's JSON (docs/RESULTS.md's blocks are "
                             "written by bench_report --readme from the ledger: make compare)")
    parser.add_argument("--verify", action="store_true",
                        help="measure nothing new: re-run the headline configurations of --out's run and their "
                             "recorded PyTorch peers, and say whether each ratio lands within its recorded per-round range")
    parser.add_argument("--sample", type=int, default=3, help="--verify: headline configurations re-run (1-3)")
    parser.add_argument("--ab", metavar="BASELINE_TRAINLAB", default="",
                        help="measure no peer: the headline configurations of this build against another build's "
                             "trainlab binary (a change's before and after), interleaved, with this build's own "
                             "calibration pair as the noise floor; nothing is written")
    args = parser.parse_args()
    TRAINLAB = os.path.abspath(args.trainlab)
    MODEL = args.model
    PEER = os.path.join(ROOT, "bench", "peers", PEERS[MODEL][0])
    if not args.out:
        args.out = os.path.join(ROOT, "bench", "results",
                                "compare_torch.json" if MODEL == "smallcnn" else f"compare_torch_{MODEL}.json")
    # Every value checked here, with what is allowed, before any process starts (trainlab's own
    # limits: --seconds (0, 3600], --batch 1..65536, --threads 1..1024).
    if not (math.isfinite(args.seconds) and 0 < args.seconds <= 3600):
        parser.error(f"--seconds {args.seconds} is not in (0, 3600]")
    if not 1 <= args.batch <= 65536:
        parser.error(f"--batch {args.batch} is not in 1..65536")
    if not 1 <= args.threads <= 1024:
        parser.error(f"--threads {args.threads} is not in 1..1024")
    if not 1 <= args.rounds <= 1000:
        parser.error(f"--rounds {args.rounds} is not in 1..1000")
    if args.verify:
        if not 1 <= args.sample <= 3:
            parser.error("--sample must be 1..3")
        doc = load_run(parser, args.out)
        if "ratio_per_round" not in doc["rows"][0] or "variants" not in doc:
            sys.exit(f"compare_torch: {args.out} was written before runs recorded their per-round ratios and "
                     "variants; run make compare first")
        machine = doc["machine"]
        if not all(isinstance(machine.get(k), (int, float)) and not isinstance(machine.get(k), bool)
                   for k in ("threads", "batch", "seconds")) or \
                not all(isinstance(r.get("config"), str) and isinstance(r.get("peer", ""), str) for r in doc["rows"]):
            parser.error(f"--out {args.out!r} is not a recorded run: machine.threads/batch/seconds and each row's "
                         "config and peer are missing or mistyped")
        results = verify(doc, args.sample, args.rounds, lambda argv: run_json(argv)["samples_per_s"])
        print(f"\nverify: compare_torch run {doc.get('run_id', '?')} (recorded {doc['machine']['date']} on "
              f"{doc['machine']['cpu']}, trainlab {doc['engine']['engine']}), re-run here, {args.rounds} round(s); "
              "each figure the ratio to its recorded PyTorch peer measured in the same round; allowed: the "
              "recorded per-round ratios' min-max")
        for v in results:
            print(f"  {v['config']:38s} recorded {v['recorded']['median']:.2f}x ({v['recorded']['min']:.2f}-"
                  f"{v['recorded']['max']:.2f}); re-run {v['rerun']['median']:.2f}x ({v['rerun']['min']:.2f}-"
                  f"{v['rerun']['max']:.2f}): {v['verdict']}")
        print(f"verify: {sum(v['within'] for v in results)} of {len(results)} re-run ratios within their recorded range")
        return 0
    if args.ab:
        if not (os.access(args.ab, os.X_OK) and os.access(TRAINLAB, os.X_OK)):
            parser.error(f"--ab {args.ab!r} or --trainlab {TRAINLAB!r} is not an executable trainlab")
        return ab_builds(os.path.abspath(args.ab), args.rounds, args.threads,
                         ["--batch", str(args.batch), "--seconds", str(args.seconds)])
    if args.render_only:
        doc = load_run(parser, args.out)
        try:
            table, headline = render(doc)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            parser.error(f"--out {args.out!r} is not a recorded run: a missing or mistyped field ({error!r})")
        print(table + "\n\n" + headline)
        return 0
    if not os.access(TRAINLAB, os.X_OK):
        sys.exit(f"compare_torch: {TRAINLAB} is missing; build first (make test or make ladder)")
    probe = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        sys.exit(f"compare_torch: {TORCH_PYTHON} cannot import torch ({probe.stderr.strip()}); "
                 "install Debian's python3-torch (scripts/install-deps.sh does)")

    variants = peer_variants()
    capped = bool(os.environ.get("ONEDNN_MAX_CPU_ISA"))
    configs = trainlab_configs(args.threads, capped) + torch_configs(args.threads, variants)
    samples = {key: [] for key, *_ in configs}
    rss = {key: [] for key, *_ in configs}
    gflops = {"f32": [], "bf16": []}
    raw = []
    common = ["--batch", str(args.batch), "--seconds", str(args.seconds)]
    for r in range(args.rounds):
        for dtype in ("f32", "bf16"):
            g = run_json([TRAINLAB, "gemm", "--backend", "onednn", "--dtype", dtype, "--threads", str(args.threads),
                          "--seconds", str(min(args.seconds, 2.0))])
            gflops[dtype].append(g["gflop_per_s"])
            raw.append({"round": r, "key": f"gemm_{dtype}", "result": g})
        for key, label, kind, argv in configs:
            try:
                result = run_json(command_for(key, argv, common))
            except RuntimeError as error:
                if not key.startswith("torch_"):
                    raise
                # A PyTorch variant this machine cannot run is recorded and passed over, never fatal.
                raw.append({"round": r, "key": key, "error": str(error).splitlines()[-1]})
                print(f"round {r + 1}/{args.rounds}  {label:42s} failed: {str(error).splitlines()[-1]}", flush=True)
                continue
            samples[key].append(result["samples_per_s"])
            rss[key].append(result["peak_rss_mb"])
            raw.append({"round": r, "key": key, "result": result})
            print(f"round {r + 1}/{args.rounds}  {label:42s} {result['samples_per_s']:9.1f} samples/s  "
                  f"rss {result['peak_rss_mb']:6.0f} MB", flush=True)

    # The best PyTorch variant of each kind in this run (best_variant's rule), and every variant's figure.
    best, variant_rows = {}, []
    for kind, *_ in KINDS:
        keys = [k for k, _, kd, _ in torch_configs(args.threads, variants) if kd == kind]
        try:
            best[kind] = best_variant(keys, samples)
        except ValueError:
            errors = sorted({x["error"] for x in raw if x["key"] in keys and "error" in x})
            sys.exit(f"compare_torch: no PyTorch {kind} variant ran here, so there is no peer: {'; '.join(errors)}")
        for k in keys:
            if not samples[k]:  # failed every round: its error is in the JSON's raw entries
                continue
            variant_rows.append({"kind": kind, "variant": next(l for kk, l, *_ in configs if kk == k),
                                 "samples_per_s": summary(samples[k]), "best": k == best[kind]})
    labels = {key: label for key, label, *_ in configs}

    def ratio(a, b):
        return summary([x / y for x, y in zip(samples[a], samples[b])])

    rows = []
    for key, label, kind, _ in trainlab_configs(args.threads, capped):
        peer = best[kind]
        ceiling = gflops["bf16" if kind == "bf16" else "f32"]
        tput = summary(samples[key])
        flop = next(x["result"]["flop_per_sample"] for x in raw if x["key"] == key)
        gf = [s * flop * 1e-9 for s in samples[key]]
        rows.append({
            "config": label, "samples_per_s": tput, "peer": labels[peer], "peer_samples_per_s": summary(samples[peer]),
            "ratio": ratio(key, peer), "ratio_per_round": [x / y for x, y in zip(samples[key], samples[peer])],
            "gflop_per_s": summary(gf),
            "ceiling_share": summary([g / c for g, c in zip(gf, ceiling)]),
            "rss_mb": summary(rss[key]), "peer_rss_mb": summary(rss[peer]),
            "isa": next(x["result"].get("isa", "") for x in raw if x["key"] == key),
        })

    isa = next(x["result"].get("isa", "?") for x in raw if x["key"] == "tl_onednn_f32")
    targets = issue_targets(isa, samples, best, {key: dict(row, kind=kind) for (key, _, kind, _), row in
                                                 zip(trainlab_configs(args.threads, capped), rows)}, ratio)
    # Issue 28's further targets are SmallCNN's; beside another model they are reported, not judged.
    judged = MODEL == "smallcnn"
    targets += [
        ("2 threads over 1 thread, onednn, >= 1.7x", ratio("tl_onednn_f32_best", "tl_onednn_f32_best_1t"),
         1.7 if judged else None, None),
        ("eigen f32 training >= 2x PyTorch as shipped", ratio("tl_eigen_f32", "torch_f32_shipped"),
         2.0 if judged else None, None),
    ]
    if MODEL in NO_LAYOUT:
        targets.append(("(report) fusion's worth: onednn f32 fused over unfused",
                        ratio("tl_onednn_f32_best", "tl_onednn_f32"), None, None))
    else:
        targets += [
            ("(report) fusion's worth: onednn f32 nhwc fused over unfused",
             ratio("tl_onednn_f32_best", "tl_onednn_f32_nhwc"), None, None),
            ("(report) channels_last's worth: onednn f32 nhwc over nchw, both unfused",
             ratio("tl_onednn_f32_nhwc", "tl_onednn_f32"), None, None)]
    targets += [
        ("peak RSS, onednn f32 <= 0.5x PyTorch as shipped f32",
         summary([a / b for a, b in zip(rss["tl_onednn_f32"], rss["torch_f32_shipped"])]), None, 0.5 if judged else None),
        ("peak RSS, onednn bf16 <= 0.5x best PyTorch bf16",
         summary([a / b for a, b in zip(rss["tl_onednn_bf16_best"], rss[best["bf16"]])]), None,
         0.5 if judged else None),
    ]
    if not capped:
        targets.append(("(report) bf16 without native bf16 instructions, relative to native",
                        ratio("tl_onednn_bf16_no_native", "tl_onednn_bf16_best"), None, None))

    machine = {"cpu": platform.processor() or platform.machine(), "python": sys.version.split()[0],
               "torch": probe.stdout.strip(), "threads": args.threads, "batch": args.batch,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        with open("/proc/cpuinfo") as f:
            machine["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    engine = next(x["result"]["versions"] for x in raw if x["key"] == "tl_onednn_f32")

    verdicts = [{"target": name, "value": value, "verdict": target_verdict(value, at_least, at_most)}
                for name, value, at_least, at_most in targets]
    machine["rounds"], machine["seconds"] = args.rounds, args.seconds
    now = datetime.datetime.now(datetime.timezone.utc)
    run_id = now.strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    doc = {"model": MODEL, "machine": machine, "engine": engine, "gemm_gflop_per_s": gflops, "rows": rows,
           "targets": verdicts,
           "variants": variant_rows, "peer_variants": variants, "raw": raw, "run_id": run_id, "run_time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": "python3 bench/compare_torch.py " + " ".join(sys.argv[1:])}
    table, headline = render(doc)
    print("\n" + table)


    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    print(f"\nall measurements: {args.out}")

    if args.ledger:
        n = append_ledger(args.ledger, doc, samples, labels, configs, best)
        print(f"ledger: {args.ledger} ({n} rows, run {doc['run_id']})")
    return 0


def append_ledger(path, doc, samples, labels, configs, best):
    """The run as ledger rows (schema 1, the fields every row carries), appended one line each."""
    machine, engine = doc["machine"], doc["engine"]
    common = {"schema": 1, "run_id": doc["run_id"], "status": "ok", "time": doc["run_time"],
              "device": {"name": machine["cpu"], "type": "cpu"}, "host": platform.node(), "cores": os.cpu_count(),
              "threads": machine["threads"], "backend": "onednn", "timer": "steady_clock (trainlab), perf_counter (PyTorch)",
              "versions": {"engine": engine["engine"], "compiler": engine.get("compiler", "?"),
                           "trainlab": engine.get("trainlab", "?"), "torch": machine["torch"]},
              "batch": machine["batch"], "seconds": machine["seconds"], "warmup_steps_excluded": 5,
              "command": doc["command"], "model": doc.get("model", "smallcnn")}
    lines = []
    for row in doc["rows"]:
        lines.append({**common, "kind": "compare_torch", "config_name": row["config"], "peer": row["peer"],
                      "samples_per_s": row["samples_per_s"], "peer_samples_per_s": row["peer_samples_per_s"],
                      "ratio": row["ratio"], "ratio_per_round": row["ratio_per_round"],
                      "gflop_per_s": row["gflop_per_s"], "ceiling_share": row["ceiling_share"],
                      "rss_mb": row["rss_mb"], "peer_rss_mb": row["peer_rss_mb"], "isa": row.get("isa", "")})
    # The run itself: what docs/RESULTS.md's comparison blocks need beside the rows (bench_report
    # --readme draws them from the ledger: the one writer of the generated blocks).
    lines.append({**common, "kind": "compare_torch_run", "date": machine["date"],
                  "rounds": machine.get("rounds", 0), "engine_backend": engine.get("backend", "?"),
                  "gemm_gflop_per_s": {dtype: summary(values) for dtype, values in doc["gemm_gflop_per_s"].items()},
                  "targets": doc["targets"]})
    for key, label, kind, _ in configs:
        if key.startswith("torch_"):
            line = {**common, "kind": "compare_torch_peer", "config_name": label, "peer_kind": kind,
                    "repeats": samples[key], "best": key == best[kind]}
            if not samples[key]:  # failed every round: a failed row with its (last) error, never dropped
                errors = [x["error"] for x in doc.get("raw", []) if x.get("key") == key and "error" in x]
                line.update({"status": "failed", "error": errors[-1] if errors else "no round ran"})
            lines.append(line)
    with open(path, "a") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return len(lines)


if __name__ == "__main__":
    sys.exit(main())
