"""Each model's loss and gradients from trainlab against PyTorch on the same weights and batch:
SmallCNN, ResNet-20 against its twin (bench/peers/torch_resnet.py; batch norm in training mode), and
a small GPT against nanoGPT's model (bench/peers/torch_gpt.py; composed and fused attention).

Writes random weights and a batch as safetensors, runs `trainlab grad-dump` for every CPU backend,
dtype, layout and fusion, computes the same with Debian's PyTorch, and compares norm-wise per
tensor. The oracle is PyTorch in f64:
  f64    the reference backend in f64: <= 1e-9 (the same arithmetic, to f64's rounding)
  f32    <= 1e-5, or within twice PyTorch f32's own distance from the oracle where that is larger.
         Why: a pre-activation that lands within f32's rounding of zero flips its ReLU in some
         orders of summation and not in others, and moves the gradients below it by ~1e-4. On
         ResNet-20 with this batch PyTorch f32 flips one (its bn bias gradients sit 1.4e-4 from
         the oracle, a pre-activation at 2.2e-7); trainlab's orders sit 2e-6 from it today, and
         some flipped it in earlier builds. The printed table says which bar each tensor met.
  bf16   no worse than PyTorch under torch.autocast("cpu", bfloat16) on the same oracle: error
         <= 1.5 x PyTorch's own bf16 error + 1e-2, per tensor (both round the same convolutions
         to bf16; 8-bit mantissas put both 10-35% from f64 on ResNet-20's deepest gradients; the
         1e-2 is a few bf16 roundings, 2^-8 each, where PyTorch happens to land close: its
         batch norm hands the head f32, trainlab's bf16)
(On a CPU without native bf16 the bf16 rows check the emulated path: the script prints which ran.)
Without torch in this interpreter it prints SKIPPED and why (ctest reports it skipped, not passed).
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:
    print(f"SKIPPED: {sys.executable} cannot import torch/numpy ({error}); install Debian's python3-torch")
    sys.exit(0)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
import torch_gpt  # noqa: E402  (the GPT's twin)
import torch_resnet  # noqa: E402  (the twin)
from safetensors_np import read_safetensors, write_safetensors  # noqa: E402


def tolerance(dtype, torch_error):
    """The bar for one tensor against the f64 oracle, given PyTorch's own error there in `dtype`."""
    if dtype == "f64":
        return 1e-9
    return max(1e-5, 2 * torch_error) if dtype == "f32" else 1.5 * torch_error + 1e-2


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(4096, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


# model -> (the twin, built with PyTorch's default init; the batch's sample shape (a token model: None,
# its windows [N, T] of GPT_VOCAB ids); trainlab's --model-options)
GPT_VOCAB, GPT_T = 11, 8
MODELS = {
    "smallcnn": (SmallCNN, (3, 32, 32), ""),
    "resnet": (lambda: torch_resnet.ResNet(), (3, 32, 32), ""),
    "gpt": (lambda: torch_gpt.GPT(vocab=GPT_VOCAB, n_layer=2, n_head=2, n_embd=16, block_size=GPT_T), None,
            f"n_layer=2,n_head=2,n_embd=16,block_size={GPT_T}"),
}


def torch_gradients(model_name, state, images, labels, dtype):
    """Loss and gradients in PyTorch: dtype f64 (the oracle), f32, or bf16 under autocast."""
    model = MODELS[model_name][0]()
    tensors = {k: torch.from_numpy(v.copy()) for k, v in state.items()}
    if model_name == "resnet":
        torch_resnet.load_trainlab_state(model, tensors)
    else:
        model.load_state_dict(tensors)
    x = torch.from_numpy(images.copy())
    if dtype == "f64":
        model = model.double()
        x = x if model_name == "gpt" else x.double()  # token ids stay ids
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        loss = F.cross_entropy(model(x), torch.from_numpy(labels.copy()).view(-1))
    loss.backward()
    out = {"loss": loss.detach().double().numpy()}
    for name, p in model.named_parameters():
        out[name] = p.grad.detach().double().numpy()
    return out


def relative(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    trainlab = sys.argv[1]
    # Under ONEDNN_MAX_CPU_ISA (CI's AVX2 emulation) only trainlab is capped: PyTorch picks its bf16
    # convolutions by its own CPU check, which sees the real AVX-512, and the capped oneDNN under it
    # would refuse them. The oracle runs uncapped; every trainlab process keeps the cap.
    cap = os.environ.pop("ONEDNN_MAX_CPU_ISA", None)
    trainlab_env = dict(os.environ, **({"ONEDNN_MAX_CPU_ISA": cap} if cap else {}))
    if cap:
        print(f"trainlab runs with ONEDNN_MAX_CPU_ISA={cap}; PyTorch, the oracle, uncapped")
    # The CPU backends: this test runs on every machine (the cuda backend has the GPU tests).
    backends = [line.split()[0] for line in
                subprocess.run([trainlab, "backends"], check=True, capture_output=True, text=True,
                               env=trainlab_env).stdout.splitlines()
                if line.split()[1] == "cpu"]
    # The sanitizer pass (TRAINLAB_TEST_QUICK, CI) checks the bf16 rows only, the emulated path it
    # is there for under the AVX2 cap: make test checks f32 and bf16 on this machine's own ISA.
    dtypes = ("bf16",) if os.environ.get("TRAINLAB_TEST_QUICK") == "1" else ("f32", "bf16")
    if len(dtypes) == 1:
        print("TRAINLAB_TEST_QUICK=1: the bf16 rows only (make test checks f32 too)")
    worst = {}
    paths = {}
    failures = []
    for model_name, (make, shape, options) in MODELS.items():
        torch.manual_seed(0)
        reference = make()  # PyTorch's own default init
        state = ({k: v.detach().numpy().copy() for k, v in reference.state_dict().items()} if model_name != "resnet"
                 else torch_resnet.trainlab_state(reference))
        rng = np.random.default_rng(0)
        if shape is None:  # a token model: windows of ids, the next id at every position
            images = rng.integers(0, GPT_VOCAB, (4, GPT_T)).astype(np.int64)
            labels = rng.integers(0, GPT_VOCAB, (4, GPT_T)).astype(np.int64)
        else:
            images = rng.standard_normal((16, *shape)).astype(np.float32)
            labels = rng.integers(0, 10, 16).astype(np.int64)
        with tempfile.TemporaryDirectory() as tmp:
            weights, batch, out = (os.path.join(tmp, n) for n in ("w.safetensors", "b.safetensors", "g.safetensors"))
            write_safetensors(weights, state)
            write_safetensors(batch, {"tokens" if shape is None else "images": images, "labels": labels})
            oracle = torch_gradients(model_name, state, images, labels, "f64")
            torch_error = {d: {n: relative(v, oracle[n]) for n, v in torch_gradients(model_name, state, images, labels,
                                                                                       d).items()}
                           for d in ("f32", "bf16")}
            torch_error["f64"] = {n: 0.0 for n in oracle}
            for d in ("f32", "bf16"):
                e, n = max((e, n) for n, e in torch_error[d].items())
                print(f"{model_name}: PyTorch {d} against PyTorch f64: worst {e:.2e} ({n})")
            # The same arithmetic in f64 (the reference backend): the formulas, not the rounding.
            weights64 = os.path.join(tmp, "w64.safetensors")
            write_safetensors(weights64, {k: v.astype(np.float64) for k, v in state.items()})
            subprocess.run([trainlab, "grad-dump", "--model", model_name, "--weights", weights64, "--batch", batch,
                            "--out", out, "--backend", "reference", "--dtype", "f64"]
                           + (["--model-options", options] if options else []), check=True,
                           stdout=subprocess.DEVNULL, env=trainlab_env)
            got = read_safetensors(out)
            for name, value in oracle.items():
                error = relative(got[name], value)
                worst[(model_name, "f64", False, f"{model_name} reference f64", name)] = (error, 1e-9)
                if error > 1e-9:
                    failures.append(f"{model_name} reference f64: {name} relative error {error:.2e} > 1e-9")
            for backend in backends:
                for dtype in dtypes:
                    for layout in ("nchw",) if shape is None else ("nchw", "nhwc"):  # ids have no layout
                        for fuse in (False, True):
                            cmd = [trainlab, "grad-dump", "--model", model_name, "--weights", weights, "--batch", batch,
                                   "--out", out, "--backend", backend, "--dtype", dtype, "--layout", layout]
                            cmd += (["--model-options", options] if options else []) + (["--fuse"] if fuse else [])
                            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=trainlab_env)
                            meta = {}
                            got = read_safetensors(out, meta)
                            label = f"{model_name} {backend} {dtype} {layout}{' fused' if fuse else ''}"
                            # What ran natively and what was emulated (the capability table), once per backend
                            # and dtype: on a CPU without native bf16 the bf16 rows check the emulated path.
                            if (backend, dtype) not in paths:
                                paths[(backend, dtype)] = (meta.get("isa", "?"), meta.get("emulated", ""))
                            for name, value in oracle.items():
                                error = relative(got[name], value)
                                limit = tolerance(dtype, torch_error[dtype][name])
                                worst[(model_name, dtype, fuse, label, name)] = (error, limit)
                                if error > limit:
                                    failures.append(f"{label}: {name} relative error {error:.2e} > {limit:.2e}")
    for model_name in MODELS:
        for dtype, fuse in (("f64", False), ("f32", False), ("f32", True), ("bf16", False), ("bf16", True)):
            errors = [(e, k, limit) for k, (e, limit) in worst.items() if k[:3] == (model_name, dtype, fuse)]
            if errors:  # none for f32 under TRAINLAB_TEST_QUICK
                e, (_, _, _, label, name), limit = max(errors)
                print(f"{model_name} {dtype} {'fused' if fuse else 'unfused'}: worst relative error against PyTorch "
                      f"f64 {e:.2e} ({label}, {name}; its bar {limit:.2e}); {len(errors)} comparisons")
    for (backend, dtype), (isa, emulated) in sorted(paths.items()):
        print(f"{backend} {dtype} on ISA {isa}: {'emulated: ' + emulated if emulated else 'every op native'}")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"trainlab matches PyTorch {torch.__version__} (f64 the oracle) on loss and all gradients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
