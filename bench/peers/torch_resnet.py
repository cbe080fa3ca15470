#!/usr/bin/python3
"""trainlab's ResNet (models/resnet/) in PyTorch: the twin the gradient checks and the comparisons use.

The same layers and names as trainlab's state dict (conv1, bn1, layer{1,2,3}.{i}.conv1/bn1/conv2/bn2,
.downsample.0/1 for option B, fc), so trainlab's weights load into it (`load_trainlab_state`: the
batch norms' num_batches_tracked, which trainlab does not keep, are set to 0). Options as trainlab's
--model-options: depth, width, shortcut (pad | conv), zero_init, dropout.

Run as a script it is the peer for `trainlab throughput --model resnet`: the training step (SGD,
momentum 0.9, weight decay 5e-4 on the conv and linear weights only, lr 0.1), batches made before
timing, warm-up excluded, one JSON line shaped like trainlab's. Variants (--variant), '+'-joined:
  shipped          NCHW, zero_grad(set_to_none=False), the single-tensor SGD
  channels_last    model and input in torch.channels_last
  set_to_none      zero_grad(set_to_none=True) (PyTorch's tuning guide)
  foreach          SGD(foreach=True): the multi-tensor update
  jit_freeze       (forward only) traced, frozen and optimised for inference (f32 and bf16)
  inference_mode   (forward only) torch.inference_mode instead of torch.no_grad
  @ALLOCATOR       (a suffix) tuned (default), system, tcmalloc or jemalloc (peer_malloc.py)
--variant all measures the list the comparisons use in one process and names the best.
With --dtype bf16 every variant runs under torch.autocast("cpu", dtype=torch.bfloat16).
"""
import argparse
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_malloc  # noqa: E402

MALLOC = peer_malloc.ensure() if __name__ == "__main__" else None

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:
    print(json.dumps({"tool": "torch_resnet", "error": f"no torch in {sys.executable}: {error}"}))
    sys.exit(3)

import torch_smallcnn  # noqa: E402  (the shared timing loop and the AVX2-cap rule)

FEATURES = ("channels_last", "set_to_none", "foreach", "jit_freeze", "inference_mode")
# The strongest eager step and the strongest inference form under each allocator PyTorch's guide
# names and glibc's defaults too (peer_malloc.py): "@ALLOCATOR", a process of its own.
MALLOCS = ("system", "tcmalloc", "jemalloc")
VARIANTS = ["shipped", "channels_last", "set_to_none+foreach", "channels_last+set_to_none+foreach"] + [
    "channels_last+set_to_none+foreach@" + m for m in MALLOCS]
INFER_VARIANTS = ["shipped", "channels_last", "channels_last+inference_mode", "jit_freeze", "channels_last+jit_freeze"] \
    + ["channels_last+jit_freeze@" + m for m in MALLOCS]


def features_of(variant: str) -> set:
    return torch_smallcnn.parse_variant(variant, FEATURES)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride, conv_shortcut):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample, self.pad = None, None
        if stride != 1 or cin != cout:
            if conv_shortcut:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            else:  # option A: subsample, zero channels around (trainlab's pad_channels)
                before = (cout - cin) // 2
                self.pad = (before, cout - cin - before, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            shortcut = self.downsample(x)
        elif self.pad is not None:
            before, after, s = self.pad
            shortcut = F.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, before, after))
        else:
            shortcut = x
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    def __init__(self, channels=3, classes=10, depth=3, width=16, shortcut="pad", zero_init=0, dropout=0.0):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        cin = width
        for stage in range(3):
            cout = width << stage
            blocks = []
            for i in range(depth):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1, shortcut == "conv"))
                cin = cout
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.dropout = float(dropout)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if int(zero_init):
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.zeros_(m.bn2.weight)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        x = F.dropout(x, self.dropout, self.training)
        return self.fc(x)


def options_of(text: str) -> dict:
    """trainlab's --model-options text ("depth=3,width=16") as keyword arguments."""
    out = {}
    for entry in filter(None, text.split(",")):
        key, _, value = entry.partition("=")
        out[key] = value if key == "shortcut" else float(value) if key == "dropout" else int(value)
    return out


def load_trainlab_state(model: nn.Module, state: dict) -> None:
    """trainlab's state dict (numpy or torch arrays) into the twin: every tensor trainlab keeps,
    and num_batches_tracked (which it does not) at 0."""
    full = {k: torch.as_tensor(v).clone() for k, v in state.items()}
    for name, buffer in model.state_dict().items():
        if name.endswith("num_batches_tracked") and name not in full:
            full[name] = torch.zeros_like(buffer)
    model.load_state_dict(full)


def trainlab_state(model: nn.Module) -> dict:
    """The twin's state as trainlab keeps it (no num_batches_tracked), numpy f32."""
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def flop_per_sample(model: ResNet, shape, forward_only: bool) -> float:
    """2 x the multiply-adds of the convolutions and the head, as trainlab's ResNet::flop_per_sample."""
    counts = {"first": 0.0, "rest": 0.0}
    hooks = []

    def hook(module, inputs, output):
        key = "first" if module is model.conv1 else "rest"
        counts[key] += 2.0 * module.weight.numel() * (output.shape[2] * output.shape[3] if output.dim() == 4 else 1)

    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model.eval()
        model(torch.zeros(1, *shape))
        model.train()
    for h in hooks:
        h.remove()
    forward = counts["first"] + counts["rest"]
    return forward if forward_only else forward + forward + counts["rest"]


def build_step(variant: str, args, device, batches, options):
    import contextlib
    features = features_of(variant)
    if ("jit_freeze" in features or "inference_mode" in features) and not args.forward_only:
        raise ValueError(f"'{variant}': jit_freeze and inference_mode are inference forms (give --forward-only)")
    torch.manual_seed(args.seed)
    no_grad = torch.inference_mode if "inference_mode" in features else torch.no_grad
    fmt = torch.channels_last if "channels_last" in features else torch.contiguous_format
    model = ResNet(channels=args.channels, classes=10, **options).to(device=device, memory_format=fmt)
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    optimizer = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=0.1, momentum=0.9, foreach="foreach" in features)
    set_to_none = "set_to_none" in features
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    without = torch_smallcnn.bf16_without_onednn(args)
    mkldnn = (lambda: torch.backends.mkldnn.flags(enabled=False)) if without else contextlib.nullcontext
    if args.forward_only:
        model.eval()
    if "jit_freeze" in features:
        with torch.no_grad(), autocast:
            example = batches[0][0].contiguous(memory_format=fmt)
            model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, example,
                                                                                      check_trace=False)))

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="shipped", help="a variant, or 'all'")
    parser.add_argument("--model-options", default="", help="trainlab's --model-options (depth=3,width=16,...)")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--size", type=int, default=32, help="image height and width")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--forward-only", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--malloc", choices=peer_malloc.CHOICES, default="tuned")
    parser.add_argument("--list-variants", action="store_true")
    args = parser.parse_args()
    if args.list_variants:
        print(json.dumps({"train": VARIANTS, "infer": INFER_VARIANTS}))
        return 0
    variants = (INFER_VARIANTS if args.forward_only else VARIANTS) if args.variant == "all" else [args.variant]
    if args.variant == "all":  # one process has one allocator: 'all' measures the variants without their own
        variants = [v for v in variants if peer_malloc.split_variant(v)[1] is None]
    try:
        options = options_of(args.model_options)
        for v in variants:
            features_of(v)
    except ValueError as error:
        print(json.dumps({"tool": "torch_resnet", "error": str(error)}))
        return 2
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    shape = (args.channels, args.size, args.size)
    batches = [(torch.randn(args.batch, *shape, device=device), torch.randint(0, 10, (args.batch,), device=device))
               for _ in range(4)]
    flop = flop_per_sample(ResNet(channels=args.channels, **options), shape, args.forward_only)
    results = {}
    for v in variants:
        try:
            step = build_step(v, args, device, batches, options)
            results[v] = torch_smallcnn.measure_step(step, args, sync)
            results[v]["gflop_per_s"] = results[v]["samples_per_s"] * flop * 1e-9
        except Exception as error:  # a variant this PyTorch cannot run is recorded, not fatal
            if args.variant != "all":
                print(json.dumps({"tool": "torch_resnet", "error": f"variant '{v}': {error}"}))
                return 1
            results[v] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    line = {"tool": "torch_resnet", "flop_per_sample": flop, "warmup_steps_excluded": args.warmup,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "config": {"variant": args.variant, "dtype": args.dtype, "batch": args.batch, "device": args.device,
                       "threads": torch.get_num_threads(), "forward_only": args.forward_only, "seed": args.seed,
                       "model_options": args.model_options, "input": list(shape)},
            "versions": {"torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
                         "blas": torch_smallcnn.blas_library(),
                         "python": sys.version.split()[0]},
            "malloc": MALLOC, "timer": "perf_counter" + (" after torch.cuda.synchronize()" if args.device == "cuda" else "")}
    if args.variant == "all":
        line["variants"] = results
        measured = [v for v in variants if "samples_per_s" in results[v]]
        if measured:
            line["best_variant"] = max(measured, key=lambda v: results[v]["samples_per_s"])
    else:
        line.update(results[args.variant])
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
