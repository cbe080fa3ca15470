#!/usr/bin/python3
"""SmallCNN or ResNet trained on Fashion-MNIST in PyTorch: the peer of `make fashion` and `make resnet`
(studies/fashion).

The same run as trainlab's, rule for rule: the IDX files read whole (gzipped or not), values =
pixels / 255 standardised by the training split's mean and standard deviation (computed here
from the same files, as the trainlab import does), SmallCNN for 1x28x28 and 10 classes (conv1
1->32, conv2 32->64, fc1 3136->256, fc2 256->10, ReLU, 2x2 max-pools) with PyTorch's default
initialisation (trainlab's InitOptions draw the same distributions), SGD with momentum, the
learning rate per step from trainlab's warmup_cosine or constant schedule, a fresh random
permutation of the training set each epoch with the last partial batch dropped (trainlab's
DataLoader rule: same rule, not the same order), evaluation on the whole test split at the end.
Training time excludes the evaluation and the data preparation.

--model resnet trains trainlab's ResNet twin (bench/peers/torch_resnet.py: He initialisation, batch
norm) with --model-options as trainlab's, weight decay (--weight-decay) on the convolution and
linear weights only (trainlab's parameter groups: none on batch norm and biases).

The model runs in its strongest form on this machine: before training, each variant below is timed
for --probe-steps steps, then the fastest again under each other allocator (glibc's defaults,
tcmalloc, jemalloc: peer_malloc.py; a process of its own each, this script run with --variant
V@ALLOCATOR --probe-only), and the fastest of all trains (named in the output, every probe beside
it; one under another allocator trains in a process of its own). Variants differ in memory layout,
how fc1/fc2 run (SmallCNN), how gradients are zeroed and the optimiser's update loop (set_to_none,
foreach: PyTorch's tuning guide) and the allocator, not in arithmetic.

Prints one JSON line. Run it under /usr/bin/python3 (Debian's python3-torch).
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_malloc  # noqa: E402

MALLOC = peer_malloc.ensure() if __name__ == "__main__" else None

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:
    print(json.dumps({"tool": "torch_fashion", "error": f"no torch/numpy in {sys.executable}: {error}"}))
    sys.exit(3)

import torch_resnet  # noqa: E402  (the ResNet twin)

VARIANTS = {
    "smallcnn": ["shipped", "channels_last", "linear_as_conv", "linear_as_conv+channels_last",
                 "linear_as_conv+channels_last+set_to_none+foreach"],
    "resnet": ["shipped", "channels_last", "set_to_none+foreach", "channels_last+set_to_none+foreach"],
}


def read_idx(directory, stem, dims):
    """The array of one IDX file (stem like 'train-images-idx3-ubyte'), gzipped or not."""
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with (gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb")) as f:
                data = f.read()
            magic = int.from_bytes(data[0:4], "big")
            if magic != 0x800 + dims:
                raise ValueError(f"{path}: magic 0x{magic:08x}, expected 0x{0x800 + dims:08x}")
            shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
            array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
            if array.size != int(np.prod(shape)):
                raise ValueError(f"{path}: {array.size} bytes of data, its header says {int(np.prod(shape))}")
            return array.reshape(shape)
    raise FileNotFoundError(f"{directory}: no {stem}[.gz]")


class SmallCNN(nn.Module):
    def __init__(self, linear_as_conv=False, channels=1, side=28, classes=10):
        super().__init__()
        self.linear_as_conv = linear_as_conv
        self.flat = 64 * (side // 4) * (side // 4)
        self.conv1 = nn.Conv2d(channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        if linear_as_conv:  # the same weights as 1x1 convolutions (oneDNN instead of the reference BLAS)
            self.fc1 = nn.Conv2d(self.flat, 256, 1)
            self.fc2 = nn.Conv2d(256, classes, 1)
        else:
            self.fc1 = nn.Linear(self.flat, 256)
            self.fc2 = nn.Linear(256, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        if self.linear_as_conv:
            x = x.reshape(x.shape[0], self.flat, 1, 1)
            return self.fc2(F.relu(self.fc1(x))).flatten(1)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def lr_at(step, args, total):
    if args.schedule == "constant":
        return args.lr
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = min(1.0, (step - args.warmup_steps) / (total - args.warmup_steps))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * progress))


def make(variant, args, seed):
    torch.manual_seed(seed)
    if args.model == "resnet":
        model = torch_resnet.ResNet(channels=1, classes=10, **torch_resnet.options_of(args.model_options))
    else:
        model = SmallCNN(linear_as_conv="linear_as_conv" in variant)
    fmt = torch.channels_last if "channels_last" in variant else torch.contiguous_format
    return model.to(memory_format=fmt), fmt


def optimizer_for(model, variant, args):
    """SGD with momentum; weight decay on the weights of rank > 1 only (trainlab's groups) for ResNet."""
    groups = [{"params": [p for p in model.parameters() if p.dim() > 1], "weight_decay": args.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() <= 1],
               "weight_decay": args.weight_decay if args.model == "smallcnn" else 0.0}]
    return torch.optim.SGD(groups, lr=args.lr, momentum=args.momentum, foreach="foreach" in variant)


def train_step(model, optimizer, variant, xb, yb):
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none="set_to_none" in variant)
    return loss


def probe(variant, x, y, args):
    """Seconds per step of one variant (warm-up excluded)."""
    model, fmt = make(variant, args, 0)
    optimizer = optimizer_for(model, variant, args)
    times = []
    batches = max(1, x.shape[0] // args.batch)
    for i in range(3 + args.probe_steps):
        start = time.perf_counter()
        b = i % batches
        xb = x[b * args.batch:(b + 1) * args.batch].contiguous(memory_format=fmt)
        train_step(model, optimizer, variant, xb, y[b * args.batch:(b + 1) * args.batch])
        if i >= 3:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


MALLOCS = ("system", "tcmalloc", "jemalloc")


def rerun(variant, extra):
    """This script again with --variant `variant` (its @ALLOCATOR applied by peer_malloc) and the same
    other arguments: its JSON result line, or {"error": why}."""
    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg in ("--variant", "--malloc"):
            skip = True
        elif not arg.startswith(("--variant=", "--malloc=")):
            argv.append(arg)
    done = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv + ["--variant", variant] + extra,
                          capture_output=True, text=True)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": f"--variant {variant}: exit code {done.returncode}, {(done.stdout + done.stderr)[-300:]!r}"}


def strongest(x, y, args):
    """The fastest variant by probe: the model's variants here, then the fastest under each other
    allocator (a process each); (variant, every probe's seconds per step, probes that failed)."""
    probes = {v: probe(v, x, y, args) for v in VARIANTS[args.model]}
    fastest = min(VARIANTS[args.model], key=lambda v: probes[v])
    failed = {}
    for malloc in MALLOCS:
        result = rerun(fastest + "@" + malloc, ["--probe-only"])
        if "error" in result:
            failed[fastest + "@" + malloc] = result["error"]
        else:
            probes.update(result["probe_seconds_per_step"])
    return min(probes, key=lambda v: probes[v]), probes, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="the IDX files' directory")
    parser.add_argument("--model", choices=sorted(VARIANTS), default="smallcnn")
    parser.add_argument("--model-options", default="", help="trainlab's --model-options for --model resnet")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--min-lr", type=float, default=0.0)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--schedule", choices=["constant", "warmup_cosine"], default="warmup_cosine")
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    parser.add_argument("--variant", default="best", help=f"best (probe the model's variants: {VARIANTS}) or one")
    parser.add_argument("--probe-steps", type=int, default=20)
    parser.add_argument("--malloc", choices=peer_malloc.CHOICES, default="tuned",
                        help="the allocator of a --variant without @ALLOCATOR (best probes them all)")
    parser.add_argument("--probe-only", action="store_true",
                        help="time --variant for --probe-steps steps and print that alone (no training)")
    args = parser.parse_args()
    features, variant_malloc = peer_malloc.split_variant(args.variant)
    checks = [(args.epochs >= 1, "--epochs must be >= 1"), (1 <= args.batch <= 65536, "--batch must be in 1..65536"),
              (math.isfinite(args.lr) and args.lr > 0, "--lr must be a finite number > 0"),
              (math.isfinite(args.momentum) and 0 <= args.momentum < 1, "--momentum must be in [0, 1)"),
              (args.threads >= 0, "--threads must be >= 0"), (args.probe_steps >= 1, "--probe-steps must be >= 1"),
              (math.isfinite(args.weight_decay) and args.weight_decay >= 0, "--weight-decay must be >= 0"),
              (args.variant == "best" or (features in VARIANTS[args.model] and variant_malloc in (None,) + MALLOCS),
               f"--variant must be best or one of {VARIANTS[args.model]}, with @ALLOCATOR ({'|'.join(MALLOCS)}) "
               f"or without"),
              (not args.probe_only or args.variant != "best", "--probe-only takes one --variant, not best")]
    for ok, message in checks:
        if not ok:
            print(json.dumps({"tool": "torch_fashion", "error": message}))
            return 2
    try:
        torch_resnet.options_of(args.model_options)
    except ValueError as error:
        print(json.dumps({"tool": "torch_fashion", "error": f"--model-options: {error}"}))
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        train_x = read_idx(args.data, "train-images-idx3-ubyte", 3)
        train_y = read_idx(args.data, "train-labels-idx1-ubyte", 1)
        test_x = read_idx(args.data, "t10k-images-idx3-ubyte", 3)
        test_y = read_idx(args.data, "t10k-labels-idx1-ubyte", 1)
    except (OSError, ValueError) as error:
        print(json.dumps({"tool": "torch_fashion", "error": str(error)}))
        return 2
    values = train_x.astype(np.float64) / 255.0
    mean, std = float(values.mean()), float(values.std())
    x = torch.from_numpy(((train_x.astype(np.float32) / 255.0 - mean) / std)[:, None, :, :].copy())
    y = torch.from_numpy(train_y.astype(np.int64))
    tx = torch.from_numpy(((test_x.astype(np.float32) / 255.0 - mean) / std)[:, None, :, :].copy())
    ty = torch.from_numpy(test_y.astype(np.int64))

    if args.probe_only:
        print(json.dumps({"tool": "torch_fashion", "malloc": MALLOC,
                          "probe_seconds_per_step": {args.variant: probe(features, x, y, args)}}))
        return 0
    probes, failed = {}, {}
    variant = args.variant
    if variant == "best":
        variant, probes, failed = strongest(x, y, args)
        if peer_malloc.split_variant(variant)[1]:
            result = rerun(variant, [])  # the fastest runs under another allocator: a process of its own
            if "error" not in result:
                result.update({"probe_seconds_per_step": probes, "probe_errors": failed})
            print(json.dumps(result))
            return 0 if "error" not in result else 2
    variant = peer_malloc.split_variant(variant)[0]
    model, fmt = make(variant, args, args.seed)
    optimizer = optimizer_for(model, variant, args)
    generator = torch.Generator().manual_seed(args.seed)
    per_epoch = x.shape[0] // args.batch
    if per_epoch < 1:
        print(json.dumps({"tool": "torch_fashion", "error": f"{x.shape[0]} training samples, fewer than --batch {args.batch}"}))
        return 2
    total = per_epoch * args.epochs
    step = 0
    losses = []
    warmup = min(5, total - 1)  # steps excluded from samples/s, as trainlab excludes its first 5
    start = time.perf_counter()
    measured_from = start
    for _ in range(args.epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for b in range(per_epoch):
            index = order[b * args.batch:(b + 1) * args.batch]
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, args, total)
            loss = train_step(model, optimizer, variant, x[index].contiguous(memory_format=fmt), y[index])
            losses.append(loss.item())
            step += 1
            if step == warmup:
                measured_from = time.perf_counter()
    end = time.perf_counter()
    train_seconds = end - start
    model.eval()
    predicted = []
    with torch.no_grad():
        for b in range(0, tx.shape[0], 250):
            predicted.append(model(tx[b:b + 250].contiguous(memory_format=fmt)).argmax(1))
    predicted = torch.cat(predicted)
    correct = (predicted == ty)
    per_class = [float(correct[ty == k].float().mean()) for k in range(10)]
    print(json.dumps({
        "tool": "torch_fashion", "torch": torch.__version__, "threads": torch.get_num_threads(), "malloc": MALLOC,
        "model": args.model, "model_options": args.model_options, "weight_decay": args.weight_decay,
        "warmup_steps_schedule": args.warmup_steps, "variant": args.variant if args.variant != "best" else variant, "probe_seconds_per_step": probes,
        "probe_errors": failed, "seed": args.seed, "epochs": args.epochs,
        "steps": total, "batch": args.batch, "lr": args.lr, "schedule": args.schedule, "momentum": args.momentum,
        "mean": mean, "std": std, "test_accuracy": float(correct.float().mean()), "per_class_accuracy": per_class,
        "test_samples": int(ty.shape[0]), "train_seconds": train_seconds,
        "warmup_steps": warmup, "samples_per_s": (total - warmup) * args.batch / (end - measured_from),
        "final_loss": losses[-1], "losses": losses}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
