#!/usr/bin/python3
"""The SmallCNN training step in PyTorch, the peer for `trainlab throughput`.

Same model (conv1 3->32, conv2 32->64, fc1 4096->256, fc2 256->10, ReLU, 2x2 max-pools), same
optimiser (SGD, momentum 0.9, lr 0.01), batches made before timing, warm-up steps excluded. Prints
one JSON line shaped like trainlab's.

Variants (--variant):
  shipped             the model as written, NCHW, f32
  channels_last       model and input in torch.channels_last
  linear_as_conv      fc1/fc2 as 1x1 convolutions on the [N, 4096, 1, 1] features. Debian's PyTorch
                      runs f32 nn.Linear on the reference netlib BLAS while its convolutions run on
                      oneDNN, so this variant is PyTorch's own best f32 path for the linear layers
  linear_as_conv+channels_last
With --dtype bf16 every variant runs under torch.autocast("cpu", dtype=torch.bfloat16).
Run it under /usr/bin/python3 (Debian's python3-torch); other interpreters lack torch.
"""
import argparse
import json
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:  # say why, in the same JSON shape, and fail
    print(json.dumps({"tool": "torch_smallcnn", "error": f"no torch in {sys.executable}: {error}"}))
    sys.exit(3)

VARIANTS = ["shipped", "channels_last", "linear_as_conv", "linear_as_conv+channels_last"]


class SmallCNN(nn.Module):
    def __init__(self, linear_as_conv: bool):
        super().__init__()
        self.linear_as_conv = linear_as_conv
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        if linear_as_conv:
            self.fc1 = nn.Conv2d(4096, 256, 1)
            self.fc2 = nn.Conv2d(256, 10, 1)
        else:
            self.fc1 = nn.Linear(4096, 256)
            self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        if self.linear_as_conv:
            x = x.reshape(x.shape[0], 4096, 1, 1)
            x = F.relu(self.fc1(x))
            return self.fc2(x).flatten(1)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def flop_per_sample(forward_only: bool) -> float:
    conv1, conv2 = 32 * 32 * 32 * 3 * 9, 64 * 16 * 16 * 32 * 9
    fc1, fc2 = 4096 * 256, 256 * 10
    forward = conv1 + conv2 + fc1 + fc2
    return 2.0 * (forward if forward_only else forward + (conv2 + fc1 + fc2) + forward)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=VARIANTS, default="shipped")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--forward-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: the eager step on the GPU, each step timed after torch.cuda.synchronize()")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"tool": "torch_smallcnn", "error": "--device cuda: torch.cuda.is_available() is False"}))
        return 3
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    channels_last = "channels_last" in args.variant
    model = SmallCNN("linear_as_conv" in args.variant)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # Batches arrive NCHW, as a data loader delivers them; the channels_last variants convert each
    # one inside the timed step, exactly as trainlab counts its own input reorder.
    batches = [(torch.randn(args.batch, 3, 32, 32, device=device), torch.randint(0, 10, (args.batch,), device=device))
               for _ in range(4)]
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def step(i):
        x, y = batches[i % 4]
        x = x.contiguous(memory_format=fmt)
        if args.forward_only:
            with torch.no_grad(), autocast:
                model(x)
            return
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    for i in range(args.warmup):
        step(i)
    sync()
    step_seconds = []
    start = time.perf_counter()
    i = 0
    while len(step_seconds) < 3 or time.perf_counter() - start < args.seconds:
        t = time.perf_counter()
        step(args.warmup + i)
        sync()  # a GPU step is timed to its end, not to its launch
        step_seconds.append(time.perf_counter() - t)
        i += 1
    seconds = time.perf_counter() - start
    samples_per_s = len(step_seconds) * args.batch / seconds
    flop = flop_per_sample(args.forward_only)
    print(json.dumps({
        "tool": "torch_smallcnn",
        "samples_per_s": samples_per_s,
        "gflop_per_s": samples_per_s * flop * 1e-9,
        "flop_per_sample": flop,
        "steps": len(step_seconds),
        "seconds": seconds,
        "warmup_steps_excluded": args.warmup,
        "step_seconds": step_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "config": {"variant": args.variant, "dtype": args.dtype, "batch": args.batch, "device": args.device,
                   "threads": torch.get_num_threads(), "forward_only": args.forward_only, "seed": args.seed},
        "versions": {"torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
                     "python": sys.version.split()[0]},
        "timer": "perf_counter" + (" after torch.cuda.synchronize()" if args.device == "cuda" else ""),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
