#!/usr/bin/python3
"""PyTorch DDP over gloo on the CPU: the peer for bench_scaling.

Starts `--world` processes on this host (torch.multiprocessing, a file:// rendezvous), each with
`--threads` threads, wraps the `--model`'s twin (torch_smallcnn.py's SmallCNN, or torch_resnet.py's
ResNet with `--model-options` as trainlab's) in DistributedDataParallel (gloo) and times training
steps, for one --variant or (default) every training variant that model's peer defines and DDP's own
knobs on the strongest of them (DDP_FEATURES: gradient_as_bucket_view, static_graph, 1 MiB buckets), in
turn in the same process group, each its own DDP model, then the strongest DDP form under each other
allocator (ALLOCATOR_VARIANTS: a process group of its own each, this script run again with
--variant V@ALLOCATOR; one that fails is named under "variant_errors"): per-rank batch `--batch`, SGD
momentum 0.9 at `--lr` (weight decay `--weight-decay` on a ResNet's conv and linear weights only, as
trainlab's parameter groups), batches made in memory before timing (no decode work), `--warmup`
steps excluded, then `--steps` steps after a barrier. The time is the slowest rank's. A ResNet's
batch-norm buffers stay each rank's own (broadcast_buffers=False), as trainlab's DDP keeps them.
Prints one JSON line:
{"tool": "torch_ddp", "world": W, "samples_per_s": ..., "step_seconds": [...], ...}.

Run it under /usr/bin/python3 (Debian's python3-torch); other interpreters lack torch.
"""
import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_malloc  # noqa: E402

# Before torch is imported: the allocator setting (peer_malloc.py says why); only when run, not imported.
MALLOC = peer_malloc.ensure() if __name__ == "__main__" else None

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
except ImportError as error:
    print(json.dumps({"tool": "torch_ddp", "error": f"no torch in {sys.executable}: {error}"}))
    sys.exit(3)

import torch_resnet  # noqa: E402
import torch_smallcnn  # noqa: E402

PEERS = {"smallcnn": torch_smallcnn, "resnet": torch_resnet}

# DistributedDataParallel's own knobs, named by its notes and PyTorch's performance tuning guide:
# gradients as views into the all-reduce buckets (no copy into them), a static graph (the autograd
# hooks' order planned once), and 1 MiB buckets in place of the default 25 MiB (more, earlier
# all-reduces to overlap with the backward). Measured as variants of the model's last training
# variant without an allocator of its own (its layout and optimiser knobs), each alone and the first
# two together.
DDP_FEATURES = ("gradient_as_bucket_view", "static_graph", "bucket_1mb")


def ddp_variants(peer) -> list:
    base = [v for v in peer.VARIANTS if peer_malloc.split_variant(v)[1] is None][-1]
    return [base + "+" + k for k in DDP_FEATURES] + [base + "+gradient_as_bucket_view+static_graph"]


# The allocators PyTorch's tuning guide names and glibc's defaults (peer_malloc.py), each under the
# strongest DDP form (both knobs on the twin's tuned variant): one process has one allocator, so each
# is a process group of its own, run after the in-process variants of the same round.
MALLOCS = ("system", "tcmalloc", "jemalloc")


def allocator_variants(peer) -> list:
    return [ddp_variants(peer)[-1] + "@" + m for m in MALLOCS]


def in_process_variants(peer) -> list:
    """What --variant all measures in one process group: the twin's variants without an allocator of
    their own, then the DDP knobs."""
    return [v for v in peer.VARIANTS if peer_malloc.split_variant(v)[1] is None] + ddp_variants(peer)


def all_variants(peer) -> list:
    """Every variant --variant takes: the twin's training variants (its own @ALLOCATOR ones too), the
    DDP knobs on its strongest layout, and that under each allocator."""
    return list(peer.VARIANTS) + ddp_variants(peer) + allocator_variants(peer)


def split_ddp(variant: str):
    """("channels_last+set_to_none", {"static_graph"}) from "channels_last+set_to_none+static_graph":
    the model's own variant (with its @ALLOCATOR) and the DDP knobs."""
    name, malloc = peer_malloc.split_variant(variant)
    parts = name.split("+")
    knobs = {p for p in parts if p in DDP_FEATURES}
    model = "+".join(p for p in parts if p not in DDP_FEATURES) or "shipped"
    return model + ("@" + malloc if malloc else ""), knobs


def model_and_optimizer(args, variant: str):
    """The variant's model (in its memory format) and its SGD: SmallCNN as torch_smallcnn builds it,
    ResNet with --model-options and trainlab's parameter groups (no decay on batch norm and biases)."""
    variant = split_ddp(variant)[0]  # the model's own variant; measure() applies the DDP knobs
    features = PEERS[args.model].features_of(variant)
    fmt = torch.channels_last if "channels_last" in features else torch.contiguous_format
    foreach = "foreach" in features
    if args.model == "smallcnn":
        model = torch_smallcnn.model_for(variant).to(memory_format=fmt)
        groups = [{"params": list(model.parameters()), "weight_decay": args.weight_decay}]
    else:
        model = torch_resnet.ResNet(channels=3, classes=10, **torch_resnet.options_of(args.model_options))
        model = model.to(memory_format=fmt)
        groups = [{"params": [p for p in model.parameters() if p.dim() > 1], "weight_decay": args.weight_decay},
                  {"params": [p for p in model.parameters() if p.dim() <= 1], "weight_decay": 0.0}]
    # foreach=None is PyTorch's own default choice (the single-tensor loop on the CPU).
    optimiser = torch.optim.SGD(groups, lr=args.lr, momentum=0.9, foreach=True if foreach else None)
    return model, optimiser, fmt, "set_to_none" in features or args.model == "smallcnn"


def measure(rank: int, args, variant: str) -> float:
    """One variant under DDP: warm-up, a barrier, --steps timed steps; the slowest rank's total seconds."""
    torch.manual_seed(args.seed)
    model, optimiser, fmt, set_to_none = model_and_optimizer(args, variant)
    knobs = split_ddp(variant)[1]
    ddp = DistributedDataParallel(model, broadcast_buffers=False,
                                  gradient_as_bucket_view="gradient_as_bucket_view" in knobs,
                                  static_graph="static_graph" in knobs,
                                  bucket_cap_mb=1 if "bucket_1mb" in knobs else 25)
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    images = torch.randn(args.batch, 3, 32, 32, generator=generator).contiguous(memory_format=fmt)
    labels = torch.randint(0, 10, (args.batch,), generator=generator)

    def step():
        optimiser.zero_grad(set_to_none=set_to_none)
        if args.dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(ddp(images), labels)
        else:
            loss = F.cross_entropy(ddp(images), labels)
        loss.backward()
        optimiser.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    total = torch.tensor([sum(times)], dtype=torch.float64)
    dist.all_reduce(total, op=dist.ReduceOp.MAX)
    return total.item(), times


def worker(rank: int, args, rendezvous: str, results) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=args.world)
    out = {}
    # In turn, each its own DDP model; 'all' leaves out the variants with an allocator of their own
    # ("@tcmalloc"): one process has one allocator, so main() runs those as --variant V@ALLOCATOR.
    every = in_process_variants(PEERS[args.model])
    for variant in (every if args.variant == "all" else [args.variant]):
        total, times = measure(rank, args, variant)
        out[variant] = {"slowest_total_s": total, "step_seconds": times}
    if rank == 0:
        results.put(out)
    dist.barrier()
    dist.destroy_process_group()


def run_under_allocator(args, variant: str) -> dict:
    """One allocator variant: this script again with --variant V@ALLOCATOR (peer_malloc re-executes it
    with that allocator's environment); its result, or {"error": why}."""
    command = [sys.executable, os.path.abspath(__file__), "--world", str(args.world), "--batch", str(args.batch),
               "--lr", str(args.lr), "--threads", str(args.threads), "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--model", args.model, "--model-options", args.model_options, "--weight-decay",
               str(args.weight_decay), "--dtype", args.dtype, "--seed", str(args.seed), "--variant", variant]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=660)
    except subprocess.TimeoutExpired:
        return {"error": "no result within 660 s"}
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": f"exit code {done.returncode}, no result line: {(done.stdout + done.stderr)[-300:]!r}"}
    if "error" in result:
        return {"error": result["error"]}
    return {"samples_per_s": result["samples_per_s"], "step_seconds": result["step_seconds"], "malloc": result["malloc"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=1, help="threads per rank")
    parser.add_argument("--steps", type=int, default=20, help="measured steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--model", choices=sorted(PEERS), default="smallcnn",
                        help="trainlab's model whose twin to train (its torch_twin)")
    parser.add_argument("--model-options", default="",
                        help="the ResNet's keys as trainlab's --model-options (depth=3,width=16,...)")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--variant", default="all",
                        help="one variant, or all of them in turn in the same process group (default); the JSON "
                             "line then has each under 'variants'")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--malloc", choices=peer_malloc.CHOICES, default="tuned",
                        help="tuned (default): glibc malloc without per-allocation mmap (peer_malloc.py says why)")
    args = parser.parse_args()
    if args.world < 1 or args.batch < 1 or args.steps < 1:
        parser.error("--world, --batch and --steps must be >= 1")
    peer = PEERS[args.model]
    if args.variant != "all" and args.variant not in all_variants(peer):
        parser.error(f"--variant {args.variant!r}: {args.model}'s training variants are {all_variants(peer)} or all")
    if args.model_options and args.model != "resnet":
        parser.error(f"--model-options {args.model_options!r}: only --model resnet takes keys")
    try:
        torch_resnet.ResNet(**torch_resnet.options_of(args.model_options))
    except (ValueError, TypeError) as error:
        parser.error(f"--model-options {args.model_options!r}: {error}")
    with tempfile.TemporaryDirectory(prefix="trainlab_torch_ddp_") as directory:
        context = mp.get_context("spawn")
        results = context.Queue()
        rendezvous = os.path.join(directory, "rendezvous")
        processes = [context.Process(target=worker, args=(r, args, rendezvous, results)) for r in range(args.world)]
        for process in processes:
            process.start()
        # Rank 0 puts the result; a worker that dies (an exception, a signal) ends the wait at once,
        # named by its exit code, instead of after the 10-minute deadline.
        result, deadline = None, time.monotonic() + 600
        while result is None and time.monotonic() < deadline:
            try:
                result = results.get(timeout=1)
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in processes):
                    break
        for process in processes:
            process.join(timeout=60 if result is not None else 5)
            if process.is_alive():
                process.kill()
        failed = [p.exitcode for p in processes if p.exitcode != 0]
        if result is None and not failed:
            failed = ["no result within 600 s"]
        if failed:
            print(json.dumps({"tool": "torch_ddp", "error": f"worker exit codes {failed}"}))
            return 1
    global_batch = args.batch * args.world
    variants = {v: {"samples_per_s": global_batch * args.steps / r["slowest_total_s"], "step_seconds": r["step_seconds"]}
                for v, r in result.items()}
    line = {
        "tool": "torch_ddp",
        "model": args.model,
        "model_options": args.model_options,
        "world": args.world,
        "backend": "gloo",
        "variant": args.variant,
        "dtype": args.dtype,
        "batch_per_rank": args.batch,
        "global_batch": global_batch,
        "threads_per_rank": args.threads,
        "warmup_steps_excluded": args.warmup,
        "torch": torch.__version__,
        "malloc": MALLOC,
    }
    if args.variant == "all":
        errors = {}
        for variant in allocator_variants(peer):
            measured = run_under_allocator(args, variant)
            if "error" in measured:
                errors[variant] = measured["error"]
            else:
                variants[variant] = measured
        line["variants"] = variants
        if errors:
            line["variant_errors"] = errors
    else:
        line.update(variants[args.variant])
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
