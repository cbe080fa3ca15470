#!/usr/bin/python3
"""The SmallCNN training step in PyTorch, the peer for `trainlab throughput`.

Same model (conv1 3->32, conv2 32->64, fc1 4096->256, fc2 256->10, ReLU, 2x2 max-pools), same
optimiser (SGD, momentum 0.9, lr 0.01), batches made before timing, warm-up steps excluded. Prints
one JSON line shaped like trainlab's.

Variants (--variant), each a '+'-joined set of features:
  shipped             the model as written, NCHW, f32
  channels_last       model and input in torch.channels_last
  linear_as_conv      fc1/fc2 as 1x1 convolutions on the flattened [N, 4096, 1, 1] features. Debian's
                      PyTorch runs f32 nn.Linear on the reference netlib BLAS while its convolutions run
                      on oneDNN, so this moves the linear layers onto oneDNN
  fc1_as_conv8x8      fc1 as an 8x8 convolution over the unflattened [N, 64, 8, 8] features (the same
                      weights reshaped) and fc2 as a 1x1 convolution: oneDNN's direct convolution
                      kernels instead of a 1x1 over 4096 channels
  set_to_none         zero_grad(set_to_none=True): gradients freed, not zero-filled (PyTorch's guide)
  foreach             SGD(foreach=True): the multi-tensor optimiser step
  jit_freeze          (forward only) the model traced, frozen and optimised for inference
                      (torch.jit.freeze, torch.jit.optimize_for_inference), in f32 and bf16
  inference_mode      (forward only) torch.inference_mode instead of torch.no_grad
  @ALLOCATOR          (a suffix) the process's allocator: tuned (the default), system, tcmalloc or
                      jemalloc (peer_malloc.py); e.g. channels_last@tcmalloc
  no_mkldnn           torch.backends.mkldnn disabled (PyTorch's native kernels): the control for
                      what oneDNN is worth inside PyTorch
VARIANTS lists the combinations the comparisons measure; every comparison takes the best per dtype
(and per training / forward only) in the same run. --variant all measures them all in one process,
interleaved, and prints one JSON line with each.
With --dtype bf16 every variant runs under torch.autocast("cpu", dtype=torch.bfloat16).
Run it under /usr/bin/python3 (Debian's python3-torch); other interpreters lack torch.
"""
import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_malloc  # noqa: E402

# Before torch is imported: the allocator setting (peer_malloc.py says why); only when run, not imported.
MALLOC = peer_malloc.ensure() if __name__ == "__main__" else None

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:  # say why, in the same JSON shape, and fail
    print(json.dumps({"tool": "torch_smallcnn", "error": f"no torch in {sys.executable}: {error}"}))
    sys.exit(3)

FEATURES = ("channels_last", "linear_as_conv", "fc1_as_conv8x8", "set_to_none", "foreach", "jit_freeze",
            "inference_mode", "no_mkldnn")
# In this order: an exact tie goes to the earlier (simpler) variant.
# no_mkldnn is not among them: it is PyTorch without its oneDNN kernels, 3.7x slower than shipped in
# f32 training here (137 against 506 samples/s, batch 128, 2 threads), never a contender; it stays a
# feature for whoever wants the control.
LAYOUTS = ["shipped", "channels_last", "linear_as_conv", "linear_as_conv+channels_last", "fc1_as_conv8x8",
           "fc1_as_conv8x8+channels_last"]
# The knobs PyTorch's performance tuning guide names, on the strongest layouts (fc1 as an 8x8
# convolution in f32 here, the linear layers as 1x1 convolutions capped to AVX2, plain channels_last
# in bf16): the optimiser's step without zero-filling (set_to_none) and its multi-tensor form
# (foreach); then that step under each allocator the guide names and glibc's defaults
# (peer_malloc.py), each a process of its own. Measured 2026-12-06: tcmalloc +25% in bf16, jemalloc
# with the guide's MALLOC_CONF 3-5x slower, glibc's defaults 2x slower. The last of TUNED is the DDP
# peer's base (torch_ddp.py).
TUNED = ["channels_last+set_to_none+foreach", "linear_as_conv+channels_last+set_to_none+foreach",
         "fc1_as_conv8x8+channels_last+set_to_none+foreach"]
VARIANTS = LAYOUTS + TUNED + [TUNED[2] + "@" + m for m in ("system", "tcmalloc", "jemalloc")] + [
    TUNED[0] + "@tcmalloc", TUNED[1] + "@tcmalloc"]
# Forward only: the eager layouts under no_grad, under torch.inference_mode, and the frozen
# TorchScript form (torch.jit.freeze + optimize_for_inference); the strongest of those under tcmalloc
# (and the frozen 8x8 form under every allocator).
FROZEN = "fc1_as_conv8x8+channels_last+jit_freeze"
INFER_VARIANTS = LAYOUTS + ["channels_last+inference_mode", "fc1_as_conv8x8+channels_last+inference_mode",
                            "channels_last+jit_freeze", FROZEN] + [FROZEN + "@" + m for m in
                                                                   ("system", "tcmalloc", "jemalloc")] + [
    "channels_last+jit_freeze@tcmalloc", "channels_last+inference_mode@tcmalloc"]


def parse_variant(variant: str, features) -> set:
    """A variant name "shipped" or "A+B[@ALLOCATOR]" as its set of features (each peer's own list);
    raises ValueError naming what is not a feature or an allocator. Every peer parses its names so."""
    variant, malloc = peer_malloc.split_variant(variant)
    if malloc is not None and malloc not in peer_malloc.CHOICES:
        raise ValueError(f"unknown allocator '@{malloc}'; allowed: {list(peer_malloc.CHOICES)}")
    if variant == "shipped":
        return set()
    parts = set(variant.split("+"))
    unknown = parts - set(features)
    if unknown:
        raise ValueError(f"unknown variant feature(s) {sorted(unknown)} in '{variant}'; allowed: shipped or a "
                         f"'+'-joined set of {list(features)}")
    return parts


def features_of(variant: str) -> set:
    """The feature set of a variant name; raises ValueError naming what is not a feature."""
    parts = parse_variant(variant, FEATURES)
    if {"linear_as_conv", "fc1_as_conv8x8"} <= parts:
        raise ValueError(f"'{variant}': linear_as_conv and fc1_as_conv8x8 are two forms of the same layer")
    return parts


class SmallCNN(nn.Module):
    """fc_form: "linear" (nn.Linear), "conv1x1" (1x1 convolutions over [N, 4096, 1, 1]) or "conv8x8"
    (fc1 an 8x8 convolution over [N, 64, 8, 8], fc2 a 1x1 convolution)."""

    def __init__(self, linear_as_conv: bool = False, fc_form: str = ""):
        super().__init__()
        self.fc_form = fc_form or ("conv1x1" if linear_as_conv else "linear")
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        if self.fc_form == "conv1x1":
            self.fc1 = nn.Conv2d(4096, 256, 1)
            self.fc2 = nn.Conv2d(256, 10, 1)
        elif self.fc_form == "conv8x8":
            self.fc1 = nn.Conv2d(64, 256, 8)
            self.fc2 = nn.Conv2d(256, 10, 1)
        else:
            self.fc1 = nn.Linear(4096, 256)
            self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        if self.fc_form == "conv1x1":
            x = x.reshape(x.shape[0], 4096, 1, 1)
            x = F.relu(self.fc1(x))
            return self.fc2(x).flatten(1)
        if self.fc_form == "conv8x8":
            x = F.relu(self.fc1(x))
            return self.fc2(x).flatten(1)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def model_for(variant: str) -> SmallCNN:
    features = features_of(variant)
    fc_form = "conv1x1" if "linear_as_conv" in features else "conv8x8" if "fc1_as_conv8x8" in features else "linear"
    return SmallCNN(fc_form=fc_form)


def flop_per_sample(forward_only: bool) -> float:
    conv1, conv2 = 32 * 32 * 32 * 3 * 9, 64 * 16 * 16 * 32 * 9
    fc1, fc2 = 4096 * 256, 256 * 10
    forward = conv1 + conv2 + fc1 + fc2
    return 2.0 * (forward if forward_only else forward + (conv2 + fc1 + fc2) + forward)


# Under an instruction-set cap below AVX-512 (make compare CPU=avx2 sets ONEDNN_MAX_CPU_ISA=AVX2),
# PyTorch still sees this CPU's AVX-512 and hands bf16 convolutions to oneDNN, which the cap leaves
# without a bf16 kernel ("could not create a primitive descriptor iterator"). On a real AVX2 CPU
# PyTorch never asks oneDNN for bf16 (its mkldnn_bf16_device_check wants AVX-512 BW/VL/DQ) and runs
# its own kernels: so does this peer, and says so in its JSON ("bf16_kernels").
CAPPED_BELOW_AVX512 = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ("SSE41", "AVX", "AVX2", "AVX2_VNNI")


def blas_library() -> str:
    """The BLAS this process runs nn.Linear on (Debian's PyTorch calls whatever libblas.so.3 is:
    netlib's reference BLAS or, with libopenblas0-pthread installed, OpenBLAS), from its mappings."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "blas" in line.split()[-1]}
    except OSError:
        return "unknown"
    return ", ".join(sorted(os.path.realpath(p) for p in paths)) or "none mapped"


def bf16_without_onednn(args):
    return args.dtype == "bf16" and args.device == "cpu" and CAPPED_BELOW_AVX512


def build_step(variant: str, args, device, batches):
    """The timed step of one variant (a closure over its own model and optimiser)."""
    import contextlib
    features = features_of(variant)
    if "jit_freeze" in features and not args.forward_only:
        raise ValueError(f"'{variant}': jit_freeze is an inference form (give --forward-only)")
    torch.manual_seed(args.seed)
    fmt = torch.channels_last if "channels_last" in features else torch.contiguous_format
    model = model_for(variant).to(device=device, memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach="foreach" in features or None)
    set_to_none = "set_to_none" in features
    no_grad = torch.inference_mode if "inference_mode" in features else torch.no_grad
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    without = "no_mkldnn" in features or bf16_without_onednn(args)
    mkldnn = (lambda: torch.backends.mkldnn.flags(enabled=False)) if without else contextlib.nullcontext
    if "jit_freeze" in features:
        model.eval()
        with torch.no_grad(), autocast:
            example = batches[0][0].contiguous(memory_format=fmt)
            # check_trace=False: PyTorch 1.13 cannot re-check a trace made under autocast (bf16).
            model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, example,
                                                                                      check_trace=False)))

    # Batches arrive NCHW, as a data loader delivers them; the channels_last variants convert each
    # one inside the timed step, exactly as trainlab counts its own input reorder.
    def step(i):
        x, y = batches[i % 4]
        x = x.contiguous(memory_format=fmt)
        with mkldnn():
            if args.forward_only:
                with no_grad(), autocast:
                    model(x)
                return
            with autocast:
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=set_to_none)

    return step


def measure(variant: str, args, device, batches, sync) -> dict:
    return measure_step(build_step(variant, args, device, batches), args, sync)


def measure_step(step, args, sync) -> dict:
    """step(i) timed: args.warmup steps excluded, then at least 3 steps and args.seconds (every peer's loop)."""
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
    return {"samples_per_s": len(step_seconds) * args.batch / seconds, "steps": len(step_seconds), "seconds": seconds,
            "step_seconds": step_seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="shipped",
                        help=f"one of {INFER_VARIANTS}, any '+'-joined set of {list(FEATURES)}, or 'all'")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds (per variant with 'all')")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--forward-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: the eager step on the GPU, each step timed after torch.cuda.synchronize()")
    parser.add_argument("--malloc", choices=peer_malloc.CHOICES, default="tuned",
                        help="tuned (default): glibc malloc without per-allocation mmap (peer_malloc.py says why)")
    parser.add_argument("--list-variants", action="store_true",
                        help="print the variants the comparisons measure (JSON: train, infer) and exit")
    args = parser.parse_args()
    if args.list_variants:
        print(json.dumps({"train": VARIANTS, "infer": INFER_VARIANTS}))
        return 0
    variants = (INFER_VARIANTS if args.forward_only else VARIANTS) if args.variant == "all" else [args.variant]
    if args.variant == "all":  # one process has one allocator: 'all' measures the variants without their own
        variants = [v for v in variants if peer_malloc.split_variant(v)[1] is None]
    try:
        for v in variants:
            features_of(v)
            if ("jit_freeze" in v or "inference_mode" in v) and not args.forward_only:
                raise ValueError(f"'{v}': {'jit_freeze' if 'jit_freeze' in v else 'inference_mode'} is an "
                                 f"inference form (give --forward-only)")
    except ValueError as error:
        print(json.dumps({"tool": "torch_smallcnn", "error": f"--variant {error}"}))
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"tool": "torch_smallcnn", "error": "--device cuda: torch.cuda.is_available() is False"}))
        return 3
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    batches = [(torch.randn(args.batch, 3, 32, 32, device=device), torch.randint(0, 10, (args.batch,), device=device))
               for _ in range(4)]
    flop = flop_per_sample(args.forward_only)
    results = {}
    for v in variants:
        try:
            results[v] = measure(v, args, device, batches, sync)
            results[v]["gflop_per_s"] = results[v]["samples_per_s"] * flop * 1e-9
        except Exception as error:  # a variant this PyTorch cannot run is recorded, not fatal
            if args.variant != "all":
                print(json.dumps({"tool": "torch_smallcnn", "error": f"variant '{v}': {error}"}))
                return 1
            results[v] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    line = {
        "tool": "torch_smallcnn",
        "flop_per_sample": flop,
        "warmup_steps_excluded": args.warmup,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "config": {"variant": args.variant, "dtype": args.dtype, "batch": args.batch, "device": args.device,
                   "threads": torch.get_num_threads(), "forward_only": args.forward_only, "seed": args.seed},
        "versions": {"torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
                         "blas": blas_library(),
                     "python": sys.version.split()[0]},
        "malloc": MALLOC,
        "bf16_kernels": ("PyTorch's own (oneDNN's bf16 needs AVX-512; ONEDNN_MAX_CPU_ISA caps below it, as an AVX2 "
                         "CPU is)") if bf16_without_onednn(args) else "as PyTorch chooses",
        "timer": "perf_counter" + (" after torch.cuda.synchronize()" if args.device == "cuda" else ""),
    }
    if args.variant == "all":
        line["variants"] = results
        measured = [v for v in variants if "samples_per_s" in results[v]]
        if measured:  # this process's own best (one pass); comparisons choose across rounds
            line["best_variant"] = max(measured, key=lambda v: results[v]["samples_per_s"])
    else:
        line.update(results[args.variant])
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
