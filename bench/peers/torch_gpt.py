#!/usr/bin/python3
"""trainlab's GPT (models/gpt/) in PyTorch: nanoGPT's model, the twin the gradient checks and the comparisons use.

The same layers and names as trainlab's state dict (transformer.wte, transformer.wpe,
transformer.h.{i}.ln_1 / attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc / mlp.c_proj, transformer.ln_f),
biases in every linear and layer norm, GELU in its tanh form, and the head tied to the token embedding
(nanoGPT's lm_head.weight is transformer.wte.weight). Options as trainlab's --model-options: n_layer,
n_head, n_embd, block_size, dropout; the vocabulary is the data's (--vocab).

Run as a script it is the peer for `trainlab throughput --model gpt`: the training step of a GPT recipe
(AdamW lr 1e-3, betas 0.9/0.99, weight decay 0.1 on the linear layers' weights only, as trainlab's parameter
groups, gradient clipping at 1.0), windows of block_size token ids made before timing, warm-up excluded, one
JSON line shaped like trainlab's (samples/s and tokens/s). The attention's formulations and knobs are
variants (--variant), '+'-joined:
  shipped          nanoGPT's attention without flash: q k^T scaled, masked_fill(-inf), softmax, dropout, @ v;
                   zero_grad(set_to_none=False), the single-tensor AdamW
  baddbmm          the scores as one torch.baddbmm over the batch of heads onto an additive causal mask
                   (PyTorch 1.13 has no scaled_dot_product_attention: its fastest formulation found here)
  set_to_none      zero_grad(set_to_none=True) (PyTorch's tuning guide)
  foreach          AdamW(foreach=True): the multi-tensor update (fused AdamW is CUDA-only in 1.13)
  jit_freeze       (forward only) traced, frozen and optimised for inference
  inference_mode   (forward only) torch.inference_mode instead of torch.no_grad
  omp1             torch.set_num_threads(1) whatever --threads says: ATen's own ops on one thread and the
                   matrix products on the BLAS's threads (Debian's PyTorch calls OpenBLAS, whose pthreads
                   take every core; two OMP threads beside them contend for two cores: f32 training ran
                   1.9x faster here with it, bf16, which goes to oneDNN on the OMP threads, 1.8x slower)
  @ALLOCATOR       (a suffix) tuned (default), system, tcmalloc or jemalloc (peer_malloc.py)
--variant all measures the list the comparisons use in one process and names the best.
With --dtype bf16 every variant runs under torch.autocast("cpu", dtype=torch.bfloat16).
"""
import argparse
import json
import math
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
    print(json.dumps({"tool": "torch_gpt", "error": f"no torch in {sys.executable}: {error}"}))
    sys.exit(3)

import torch_smallcnn  # noqa: E402  (the shared timing loop)

FEATURES = ("baddbmm", "set_to_none", "foreach", "jit_freeze", "inference_mode", "omp1")
MALLOCS = ("system", "tcmalloc", "jemalloc")
VARIANTS = ["shipped", "set_to_none+foreach", "baddbmm+set_to_none+foreach"] + [
    "baddbmm+set_to_none+foreach@" + m for m in MALLOCS] + [
    "set_to_none+foreach+omp1", "baddbmm+set_to_none+foreach+omp1", "baddbmm+set_to_none+foreach+omp1@tcmalloc"]
INFER_VARIANTS = ["shipped", "baddbmm", "baddbmm+inference_mode", "jit_freeze", "baddbmm+jit_freeze"] + [
    "baddbmm+jit_freeze@" + m for m in MALLOCS] + ["jit_freeze+omp1", "baddbmm+jit_freeze+omp1@tcmalloc"]
DEFAULT_THREADS = torch.get_num_threads()  # before any variant sets its own
DEFAULTS = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "dropout": 0.0}


def features_of(variant: str) -> set:
    return torch_smallcnn.parse_variant(variant, FEATURES)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, baddbmm=False):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.dropout, self.baddbmm = n_head, n_embd, dropout, baddbmm
        mask = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("bias", mask, persistent=False)  # nanoGPT's name; not in the state dict
        additive = torch.zeros(block_size, block_size).masked_fill(mask[0, 0] == 0, float("-inf"))
        self.register_buffer("additive_mask", additive, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        d = C // self.n_head
        k = k.view(B, T, self.n_head, d).transpose(1, 2)
        q = q.view(B, T, self.n_head, d).transpose(1, 2)
        v = v.view(B, T, self.n_head, d).transpose(1, 2)
        if self.baddbmm:
            scores = torch.baddbmm(self.additive_mask[:T, :T].to(q.dtype).expand(B * self.n_head, T, T),
                                   q.reshape(B * self.n_head, T, d), k.reshape(B * self.n_head, T, d).transpose(1, 2),
                                   alpha=1.0 / math.sqrt(d))
            att = F.softmax(scores, dim=-1).view(B, self.n_head, T, T)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
        att = F.dropout(att, self.dropout, self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = dropout

    def forward(self, x):
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, baddbmm=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout, baddbmm)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=65, n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, baddbmm=False):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout, baddbmm) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.dropout = dropout

    def forward(self, idx):
        """idx [B, T] -> logits [B * T, vocab], as trainlab's GPT gives them."""
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = F.dropout(self.transformer.wte(idx) + self.transformer.wpe(pos), self.dropout, self.training)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return F.linear(x, self.transformer.wte.weight).view(B * T, -1)  # the tied head


def options_of(text: str) -> dict:
    """trainlab's --model-options text ("n_layer=4,block_size=64") as keyword arguments."""
    out = dict(DEFAULTS)
    for entry in filter(None, text.split(",")):
        key, _, value = entry.partition("=")
        if key not in DEFAULTS:
            raise ValueError(f"unknown GPT option '{key}'; allowed: {sorted(DEFAULTS)}")
        out[key] = float(value) if key == "dropout" else int(value)
    return out


def decays(name: str) -> bool:
    """trainlab's parameter groups (GPT::decays): weight decay on the linear layers' weights only."""
    return name.endswith(".weight") and any(f".{m}." in name for m in ("c_attn", "c_proj", "c_fc"))


def load_trainlab_state(model: nn.Module, state: dict) -> None:
    """trainlab's state dict (numpy or torch arrays) into the twin."""
    model.load_state_dict({k: torch.as_tensor(v).clone() for k, v in state.items()})


def trainlab_state(model: nn.Module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def flop_per_sample(vocab: int, o: dict, forward_only: bool) -> float:
    """As trainlab's GPT::flop_per_sample: 2 x multiply-adds per token, times the window, x3 for training."""
    c, t = float(o["n_embd"]), float(o["block_size"])
    per_token = 2.0 * (o["n_layer"] * (12.0 * c * c + 2.0 * t * c) + vocab * c)
    return per_token * t * (1.0 if forward_only else 3.0)


def build_step(variant: str, args, device, batches, options):
    features = features_of(variant)
    if ("jit_freeze" in features or "inference_mode" in features) and not args.forward_only:
        raise ValueError(f"'{variant}': jit_freeze and inference_mode are inference forms (give --forward-only)")
    torch.set_num_threads(1 if "omp1" in features else args.threads if args.threads > 0 else DEFAULT_THREADS)
    torch.manual_seed(args.seed)
    no_grad = torch.inference_mode if "inference_mode" in features else torch.no_grad
    model = GPT(vocab=args.vocab, baddbmm="baddbmm" in features, **options).to(device)
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if decays(n)], "weight_decay": 0.1},
              {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), foreach="foreach" in features)
    set_to_none = "set_to_none" in features
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    # Capped below AVX-512, oneDNN has no bf16 primitives for PyTorch's bf16 ops: ATen's own (as
    # torch_smallcnn.py does).
    import contextlib
    without = torch_smallcnn.bf16_without_onednn(args)
    mkldnn = (lambda: torch.backends.mkldnn.flags(enabled=False)) if without else contextlib.nullcontext
    if args.forward_only:
        model.eval()
    if "jit_freeze" in features:
        with torch.no_grad(), autocast:
            model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, batches[0][0],
                                                                                      check_trace=False)))

    def step(i):
        x, y = batches[i % 4]
        if args.forward_only:
            with mkldnn(), no_grad(), autocast:
                model(x)
            return
        with mkldnn(), autocast:
            loss = F.cross_entropy(model(x), y.view(-1))
        with mkldnn():
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)

    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="shipped", help="a variant, or 'all'")
    parser.add_argument("--model-options", default="", help="trainlab's --model-options (n_layer=4,block_size=64,...)")
    parser.add_argument("--vocab", type=int, default=65, help="the vocabulary (trainlab's SyntheticTokens: 65)")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--batch", type=int, default=128, help="windows per step (trainlab throughput's default: 128)")
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
        print(json.dumps({"tool": "torch_gpt", "error": str(error)}))
        return 2
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    torch.manual_seed(args.seed)
    T = options["block_size"]
    batches = [(torch.randint(0, args.vocab, (args.batch, T), device=device),
                torch.randint(0, args.vocab, (args.batch, T), device=device)) for _ in range(4)]
    flop = flop_per_sample(args.vocab, options, args.forward_only)
    results = {}
    for v in variants:
        try:
            step = build_step(v, args, device, batches, options)
            results[v] = torch_smallcnn.measure_step(step, args, sync)
            results[v]["threads"] = torch.get_num_threads()
            results[v]["tokens_per_s"] = results[v]["samples_per_s"] * T
            results[v]["gflop_per_s"] = results[v]["samples_per_s"] * flop * 1e-9
        except Exception as error:  # a variant this PyTorch cannot run is recorded, not fatal
            if args.variant != "all":
                print(json.dumps({"tool": "torch_gpt", "error": f"variant '{v}': {error}"}))
                return 1
            results[v] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    line = {"tool": "torch_gpt", "flop_per_sample": flop, "tokens_per_sample": T, "warmup_steps_excluded": args.warmup,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "config": {"variant": args.variant, "dtype": args.dtype, "batch": args.batch, "device": args.device,
                       "threads": torch.get_num_threads(), "forward_only": args.forward_only, "seed": args.seed,
                       "model_options": args.model_options, "vocab": args.vocab},
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
