"""A trainlab run replayed in PyTorch (`train --record`, bench/peers/replay_torch.py): the same
initial weights, batches in the same order and learning rate at every step, through the PyTorch
twin with the same SGD (the GPT: AdamW with its betas, weight decay on its group, the gradient
norm clipped, a warm-up and cosine schedule, on SyntheticTokens windows). In f32 the two loss curves
agree step for step (relative 1e-3 over the first 8 steps; they share every input, so only rounding
separates them); a recorded run that the replay could not follow (wrong weights, batches out of
order, another lr) fails here.

Usage: check_torch_replay.py TRAINLAB"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
REPLAY = os.path.join(ROOT, "bench", "peers", "replay_torch.py")
TORCH_PYTHON = "/usr/bin/python3"


def main():
    trainlab = sys.argv[1]
    if subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"SKIPPED: {TORCH_PYTHON} cannot import torch; install Debian's python3-torch")
        return 0
    failures = []
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        gpt_recipe = ["--optimizer", "adamw", "--lr", "0.003", "--beta2", "0.99", "--weight-decay", "0.1",
                      "--grad-clip", "0.5", "--schedule", "warmup_cosine", "--warmup-steps", "2", "--fuse"]
        for model, options, recipe in (("smallcnn", "", ["--lr", "0.05"]), ("resnet", "depth=1,width=8", ["--lr", "0.05"]),
                                       ("gpt", "n_layer=2,n_embd=32,n_head=2,block_size=16", gpt_recipe)):
            record = os.path.join(tmp, model + ".safetensors")
            subprocess.run([trainlab, "train", "--model", model, *(["--model-options", options] if options else []),
                            "--steps", "8", "--batch", "32", *recipe, "--train-samples", "256",
                            "--eval-at-end", "false", "--seed", "4", "--record", record],
                           check=True, stdout=subprocess.DEVNULL)
            result = subprocess.run([TORCH_PYTHON, REPLAY, record, "--json", "--threads", "2"], capture_output=True,
                                    text=True)
            if result.returncode != 0:
                failures.append(f"{model}: replay_torch failed: {result.stderr.strip() or result.stdout.strip()}")
                continue
            line = json.loads(result.stdout.strip().splitlines()[-1])
            worst = max(abs(a - b) / abs(a) for a, b in zip(line["trainlab_loss"], line["torch_loss"]))
            print(f"{model}: 8 steps, f32: worst relative loss difference {worst:.2e} "
                  f"(trainlab {line['trainlab_loss'][-1]:.4f}, PyTorch {line['torch_loss'][-1]:.4f} at step 8)")
            if worst > 1e-3:
                failures.append(f"{model}: the replay's losses are {worst:.2e} apart (> 1e-3): "
                                f"{line['trainlab_loss']} against {line['torch_loss']}")
    for f in failures:
        print("FAIL:", f)
    print("check_torch_replay: ok" if not failures else f"check_torch_replay: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
