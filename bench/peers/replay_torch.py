#!/usr/bin/python3
"""A trainlab run replayed in PyTorch: the same initial weights, the same batches in the same order,
the same learning rate at every step (`trainlab train --record FILE`), through the model's PyTorch
twin (torch_smallcnn.py's SmallCNN, torch_resnet.py's ResNet, torch_gpt.py's GPT: a token model's
batches are windows of ids, its targets every position's next id) with the same optimiser (SGD with
momentum, or AdamW with its betas; weight decay on the parameters trainlab decays; the gradients'
norm clipped where the run clipped it). Prints both loss curves step by step and where they part,
and one JSON line (--json) with both.

  replay_torch.py FILE [--dtype f32|bf16|as-recorded] [--layout nchw|nhwc|as-recorded] [--threads N]
                  [--eval-data DIR --eval-samples N] [--foreach]

--eval-data DIR (a token model's run): after the last step, the replayed model's mean loss per token
on the first N windows of DIR's held_out split (offset 0, as trainlab's evaluation reads them), so
the two frameworks' held-out losses compare on the same windows. --foreach: AdamW's multi-tensor
update (the same arithmetic, PyTorch's faster form), for timing the replay as a training run.

With --dtype bf16 the twin runs under torch.autocast("cpu", dtype=torch.bfloat16), its masters in
f32, as trainlab's bf16 keeps f32 masters. What it answers: whether a curve trainlab's run drew (a
divergence, say) is the optimisation's, which PyTorch then draws too from the same start, or
trainlab's own. Run it under /usr/bin/python3 (Debian's python3-torch).
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_malloc  # noqa: E402

MALLOC = peer_malloc.ensure() if __name__ == "__main__" else None  # the peers' tuned glibc malloc (--malloc)
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as error:
    print(json.dumps({"tool": "replay_torch", "error": f"no torch/numpy in {sys.executable}: {error}"}))
    sys.exit(3)
import torch_gpt  # noqa: E402
import torch_resnet  # noqa: E402
import torch_smallcnn  # noqa: E402
from safetensors_np import read_safetensors  # noqa: E402


def twin(model, options, channels, state):
    if model == "smallcnn":
        return torch_smallcnn.model_for("shipped")
    if model == "resnet":
        return torch_resnet.ResNet(channels=channels, **torch_resnet.options_of(options))
    if model == "gpt":  # the vocabulary is the token embedding's rows
        return torch_gpt.GPT(vocab=state["transformer.wte.weight"].shape[0], **torch_gpt.options_of(options))
    sys.exit(f"replay_torch: no PyTorch twin of model '{model}' (smallcnn, resnet, gpt)")


def held_out_windows(directory, context, count):
    """The first `count` windows of a token data set's held_out split (engine/data/token_dataset.h):
    ids [count, context] and their next tokens, as trainlab's evaluation reads them."""
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != "trainlab-token-dataset":
        sys.exit(f"replay_torch: {directory} is not a token data set (make-dataset --from text:)")
    width = manifest["token_bytes"]
    stream = np.fromfile(os.path.join(directory, "held_out.bin"), dtype="<u2" if width == 2 else "<u4").astype(np.int64)
    count = min(count, (len(stream) - 1) // context)
    x = np.stack([stream[i * context:(i + 1) * context] for i in range(count)])
    y = np.stack([stream[i * context + 1:(i + 1) * context + 1] for i in range(count)])
    return torch.from_numpy(x), torch.from_numpy(y)


def held_out_loss(model, windows, dtype):
    x, y = windows
    model.eval()
    total = 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        for begin in range(0, len(x), 250):
            logits = model(x[begin:begin + 250]).float()
            total += float(F.cross_entropy(logits, y[begin:begin + 250].reshape(-1), reduction="sum"))
    model.train()
    return total / y.numel()


def replay(path, dtype, layout, threads, eval_data=None, eval_samples=1000, foreach=False):
    meta = {}
    tensors = read_safetensors(path, meta)
    if meta.get("tool") != "trainlab train --record":
        sys.exit(f"replay_torch: {path} is not a run trainlab train --record wrote (its metadata says "
                 f"{meta.get('tool')!r})")
    if meta.get("optimizer") not in ("sgd", "adamw") or meta.get("accumulate", "1") != "1":
        sys.exit(f"replay_torch: {path}: the replay runs SGD or AdamW without accumulation (this run: "
                 f"{meta.get('optimizer')}, accumulate {meta.get('accumulate')})")
    dtype = meta["dtype"] if dtype == "as-recorded" else dtype
    layout = meta["layout"] if layout == "as-recorded" else layout
    if threads > 0:
        torch.set_num_threads(threads)
    state = {k[len("init."):]: v.copy() for k, v in tensors.items() if k.startswith("init.")}  # writable
    model = twin(meta["model"], meta.get("model_options", ""), tensors["inputs.0"].shape[1], state)
    if meta["model"] == "resnet":
        torch_resnet.load_trainlab_state(model, state)
    else:
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    no_decay = set(filter(None, meta.get("no_decay", "").split(",")))
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n not in no_decay], "weight_decay": float(meta["weight_decay"])},
              {"params": [p for n, p in named if n in no_decay], "weight_decay": 0.0}]
    lrs = tensors["lr"]
    if meta["optimizer"] == "adamw":
        optimizer = torch.optim.AdamW(groups, lr=float(lrs[0]), foreach=foreach,
                                      betas=(float(meta.get("beta1", 0.9)), float(meta.get("beta2", 0.999))))
    else:
        optimizer = torch.optim.SGD(groups, lr=float(lrs[0]), momentum=float(meta["momentum"]))
    clip = float(meta.get("grad_clip", 0))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")
    losses = []
    start = time.perf_counter()
    for k in range(len(tensors["loss"])):
        for group in optimizer.param_groups:
            group["lr"] = float(lrs[k])
        x = torch.from_numpy(tensors[f"inputs.{k}"].copy())
        if x.dim() == 4:  # images; token ids have no layout
            x = x.contiguous(memory_format=fmt)
        y = torch.from_numpy(tensors[f"labels.{k}"].copy()).view(-1)  # a token batch's [B, T] targets
        with autocast:
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(float(loss))
    seconds = time.perf_counter() - start
    evaluation = None
    if eval_data:
        windows = held_out_windows(eval_data, tensors["inputs.0"].shape[1], eval_samples)
        evaluation = {"held_out_loss": held_out_loss(model, windows, dtype), "windows": len(windows[0])}
    meta["replay_seconds"] = seconds
    meta["evaluation"] = evaluation
    return meta, dtype, layout, [float(v) for v in tensors["loss"]], losses


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("record", help="the file trainlab train --record wrote")
    parser.add_argument("--dtype", choices=["as-recorded", "f32", "bf16"], default="as-recorded")
    parser.add_argument("--layout", choices=["as-recorded", "nchw", "nhwc"], default="as-recorded")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line with both curves, nothing else")
    parser.add_argument("--eval-data", help="a token data set: the replayed model's held-out loss on its windows")
    parser.add_argument("--eval-samples", type=int, default=1000, help="held-out windows (--eval-data)")
    parser.add_argument("--foreach", action="store_true", help="AdamW's multi-tensor update")
    parser.add_argument("--malloc", choices=peer_malloc.CHOICES, default="tuned",
                        help="the allocator (peer_malloc.py): tuned glibc by default")
    args = parser.parse_args()
    if not os.path.isfile(args.record):
        sys.exit(f"replay_torch: {args.record} is not a file (trainlab train --record FILE writes one)")
    meta, dtype, layout, ours, theirs = replay(args.record, args.dtype, args.layout, args.threads, args.eval_data,
                                               args.eval_samples, args.foreach)
    # Where the curves part: the first step whose losses differ by more than 5% of trainlab's.
    parted = next((k for k, (a, b) in enumerate(zip(ours, theirs))
                   if not (math.isfinite(b) and abs(a - b) <= 0.05 * max(abs(a), 1e-3))), None)
    line = {"tool": "replay_torch", "record": os.path.abspath(args.record), "model": meta["model"],
            "recorded_dtype": meta["dtype"], "recorded_layout": meta["layout"], "dtype": dtype, "layout": layout,
            "torch": torch.__version__, "trainlab": meta.get("version", "?"), "steps": len(ours),
            "trainlab_loss": ours, "torch_loss": theirs, "first_step_apart_5pct": parted,
            "torch_seconds": meta["replay_seconds"], "torch_evaluation": meta["evaluation"], "malloc": MALLOC}
    if args.json:
        print(json.dumps(line))
        return 0
    print(f"{meta['model']} run {args.record} (trainlab {meta.get('version', '?')}, {meta['dtype']} {meta['layout']}) "
          f"replayed in PyTorch {torch.__version__}, {dtype} {layout}:")
    print("step  trainlab loss  PyTorch loss")
    for k, (a, b) in enumerate(zip(ours, theirs)):
        print(f"{k + 1:4d}  {a:13.4f}  {b:12.4f}")
    print("the curves stay within 5% of each other" if parted is None else
          f"the curves part at step {parted + 1} (more than 5% apart)")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
