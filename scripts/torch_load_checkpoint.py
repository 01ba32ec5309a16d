#!/usr/bin/env python3
"""Load a tidepool checkpoint into a PyTorch GPT and print its loss on a batch.

    cargo run --release --example checkpoint_loss -- run.safetensors > batch.json
    python3 scripts/torch_load_checkpoint.py run.safetensors batch.json

The model below is written from nanoGPT's GPT-2 description (pre-LN blocks, causal
attention, tanh GELU, LayerNorm with bias, eps 1e-5, a head tied to the token
embedding), not from tidepool's code: the tensors load by name with
`load_state_dict(strict=True)`, so a renamed, reshaped or transposed tensor fails
here. The config and the vocabulary come from the checkpoint's metadata
(docs/checkpoint.md). It prints the loss in float32 and float64 beside tidepool's
(from batch.json) and exits 1 if float32 differs by more than --tolerance
(relative).

Runs on CPU or CUDA, with or without the `safetensors` package (the H200 machine
has PyTorch but no package registry, so the format's few lines are read here when
the package is missing).
"""

import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def read_safetensors(path):
    """(tensors by name, metadata dict) of a safetensors file."""
    try:
        from safetensors import safe_open
    except ImportError:
        safe_open = None
    if safe_open is not None:
        with safe_open(path, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n :]
    tensors = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        flat = torch.frombuffer(bytearray(body[start:end]), dtype=DTYPES[info["dtype"]])
        tensors[name] = flat.reshape(info["shape"])
    return tensors, metadata


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab, width),
                wpe=nn.Embedding(context, width),
                h=nn.ModuleList(Block(width, heads) for _ in range(layers)),
                ln_f=nn.LayerNorm(width),
            )
        )
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(t, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load(path, device, dtype):
    tensors, meta = read_safetensors(path)
    if meta.get("tidepool.format") != "1":
        sys.exit(f"{path}: tidepool.format is {meta.get('tidepool.format')!r}, this script reads '1'")
    cfg = json.loads(meta["tidepool.model_config"])
    vocab = json.loads(meta["tidepool.vocab"])
    assert len(vocab) == cfg["vocab"], "the vocabulary and the config disagree"
    model = GPT(cfg["vocab"], cfg["context"], cfg["layers"], cfg["heads"], cfg["width"])
    state = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied: not stored
    model.load_state_dict(state, strict=True)
    return model.to(device=device, dtype=dtype).eval(), cfg, meta, vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("batch", help="JSON with inputs and targets (rows of token ids) and tidepool's loss")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    # full fp32 matmuls on CUDA too (TF32 would differ from tidepool by ~1e-3)
    torch.backends.cuda.matmul.allow_tf32 = False

    with open(args.batch) as f:
        batch = json.load(f)
    losses = {}
    for dtype in (torch.float32, torch.float64):
        model, cfg, meta, vocab = load(args.checkpoint, args.device, dtype)
        inputs = torch.tensor(batch["inputs"], dtype=torch.long, device=args.device)
        targets = torch.tensor(batch["targets"], dtype=torch.long, device=args.device)
        with torch.no_grad():
            losses[dtype] = model(inputs, targets).item()
    ours = batch.get("loss")
    print(
        f"checkpoint {args.checkpoint}: step {meta['tidepool.step']}, {cfg['layers']} layers, "
        f"{cfg['heads']} heads, width {cfg['width']}, context {cfg['context']}, vocab {len(vocab)}; "
        f"batch {inputs.shape[0]} x {inputs.shape[1]} on {args.device} (torch {torch.__version__})"
    )
    print(f"torch fp32 loss  {losses[torch.float32]:.7f}")
    print(f"torch fp64 loss  {losses[torch.float64]:.7f}")
    if ours is None:
        return
    rel = abs(ours - losses[torch.float32]) / abs(losses[torch.float32])
    rel64 = abs(ours - losses[torch.float64]) / abs(losses[torch.float64])
    print(f"tidepool loss    {ours:.7f}  (relative difference {rel:.2e} vs fp32, {rel64:.2e} vs fp64)")
    if rel > args.tolerance:
        sys.exit(f"tidepool and PyTorch differ by {rel:.2e} > {args.tolerance:.0e}")


if __name__ == "__main__":
    main()
