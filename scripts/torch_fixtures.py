#!/usr/bin/env python3
"""PyTorch gold fixtures for tidepool's GPT (tests/torch_fixtures.rs checks against them).

Regenerate every fixture (needs PyTorch and numpy, no GPU; from the repository root):

    python3 scripts/torch_fixtures.py --all

which runs, for each fixture NAME in FIXTURES below,

    cargo run --release --example fixture_state -- /tmp/NAME.state.safetensors ARGS...
    python3 scripts/torch_fixtures.py /tmp/NAME.state.safetensors tests/fixtures/NAME.safetensors

The state (written by tidepool) holds the parameters under their nanoGPT names, one
batch (`idx`, `targets`) and the configs. This script builds the same GPT as an
nn.Module of its own (GPT-2 layout: biases, pre-LN blocks, tanh GELU, tied head,
LayerNorm eps 1e-5), with dropout masks from the hash the two sides share (the mask
contract in the brief / src/reference/, re-implemented here from that contract), and
computes in float64 with autograd:
  - `loss` and `grad.NAME` for every parameter: the gradients of training step 1
    (step 1's dropout masks);
  - `losses` and `after.NAME`: the loss of each of `update_steps` steps and the
    parameters after them, each step on the same batch with its own masks, global-norm
    clipping (torch.nn.utils.clip_grad_norm_) and torch.optim.AdamW with tidepool's
    schedule (1-based step: linear warmup, cosine decay to lr/10 at `steps`) and
    weight decay on the tensors with 2+ dimensions (nanoGPT's rule; checked against
    the `decay` list tidepool wrote).
The fixture holds the state's tensors and metadata plus those results, in float32.
"""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# name -> fixture_state arguments. Odd widths and head sizes on purpose.
FIXTURES = {
    "gpt_dropout0": ["--width", "20", "--heads", "2", "--vocab", "13", "--context", "13",
                     "--batch", "3", "--seed", "1337"],
    "gpt_dropout_residual": ["--width", "36", "--heads", "3", "--vocab", "17", "--context", "9",
                             "--batch", "2", "--seed", "7",
                             "--dropout", "0.1", "--placement", "residual"],
    "gpt_dropout_nanogpt": ["--width", "20", "--heads", "4", "--vocab", "11", "--context", "10",
                            "--batch", "3", "--seed", "42",
                            "--dropout", "0.2", "--placement", "nanogpt"],
}

DTYPES = {"F32": (np.float32, 4), "F64": (np.float64, 8), "I32": (np.int32, 4), "I64": (np.int64, 8)}


# ---- safetensors by hand: 8-byte little-endian header length, JSON header, raw data ----

def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        dtype, _ = DTYPES[info["dtype"]]
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=np.dtype(dtype).newbyteorder("<")).reshape(info["shape"]).copy()
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, chunks, offset = {"__metadata__": meta}, [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        tag = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[array.dtype]
        data = array.astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": tag, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


# ---- the dropout mask contract ----

M32 = 0xFFFFFFFF


def mix(h):
    """murmur3's 32-bit finaliser on uint32 values held in int64 (numpy arrays or ints)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def dropout_seed(run_seed, step, site):
    lo, hi = run_seed & M32, (run_seed >> 32) & M32
    return mix(mix(lo ^ mix(hi)) ^ mix(step) ^ ((site * 0x9E3779B9) & M32))


def keep_mask(seed, n, p):
    """Element i (flat index, wrapping u32) is kept when mix(seed ^ mix(i)) >> 8 >= round(p * 2^24)."""
    threshold = math.floor(float(np.float32(p)) * (1 << 24) + 0.5)
    i = np.arange(n, dtype=np.int64) & M32
    return (mix(seed ^ mix(i)) >> 8) >= threshold


class Dropout:
    """The masks of one training step. Sites: 0 embeddings, 1 + 2l attention residual,
    2 + 2l MLP residual, 0x10000 + l attention probabilities (placement nanogpt)."""

    def __init__(self, p, run_seed, step, placement):
        self.p, self.run_seed, self.step, self.placement = p, run_seed, step, placement
        # kept values are scaled by 1 / (1 - p), computed in f32 as tidepool does
        self.scale = float(np.float32(1.0) / (np.float32(1.0) - np.float32(p)))

    def __call__(self, x, site):
        if self.p == 0.0:
            return x
        mask = keep_mask(dropout_seed(self.run_seed, self.step, site), x.numel(), self.p)
        mask = torch.from_numpy(mask.reshape(tuple(x.shape))).to(x.device)
        return x * mask.to(x.dtype) * self.scale

    def attention(self, probs, layer):
        if self.placement != "nanogpt":
            return probs
        return self(probs, 0x10000 + layer)  # probs is [B, H, T, T]: idx = ((b*H + h)*T + i)*T + j


# ---- the model: nanoGPT's GPT-2 layout ----

class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(c, 3 * c)
        self.attn.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(c, 4 * c)
        self.mlp.c_proj = nn.Linear(4 * c, c)

    def forward(self, x, drop, layer):
        b, t, c = x.shape
        h = self.heads
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        att = drop.attention(att, layer)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + drop(self.attn.c_proj(y), 1 + 2 * layer)
        m = self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + drop(m, 2 + 2 * layer)


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, width)
        self.transformer.wpe = nn.Embedding(context, width)
        self.transformer.h = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.transformer.ln_f = nn.LayerNorm(width, eps=1e-5)

    def forward(self, idx, targets, drop):
        tr = self.transformer
        t = idx.shape[1]
        x = tr.wte(idx) + tr.wpe(torch.arange(t, device=idx.device))
        x = drop(x, 0)
        for layer, block in enumerate(tr.h):
            x = block(x, drop, layer)
        logits = tr.ln_f(x) @ tr.wte.weight.t()  # head tied to wte
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(train, step):
    """tidepool's schedule at 1-based `step`: linear warmup, cosine decay to lr/10."""
    lr, warmup, steps = train["lr"], train["warmup"], train["steps"]
    min_lr = lr / 10
    if step <= warmup:
        return lr * step / max(warmup, 1)
    if step >= steps:
        return min_lr
    progress = (step - warmup) / max(steps - warmup, 1)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def compute(state_path, out_path):
    tensors, meta = read_safetensors(state_path)
    gpt, train = json.loads(meta["gpt"]), json.loads(meta["train"])
    decay_names = set(json.loads(meta["decay"]))
    update_steps = int(meta["update_steps"])
    torch.set_default_dtype(torch.float64)
    model = GPT(gpt["vocab"], gpt["context"], gpt["layers"], gpt["heads"], gpt["width"])
    names = [n for n, _ in model.named_parameters()]
    # tidepool writes every parameter once, under nanoGPT's names, with PyTorch's shapes
    assert set(names) == set(tensors) - {"idx", "targets"}, sorted(set(names) ^ set(tensors))
    with torch.no_grad():
        for name, param in model.named_parameters():
            assert tuple(param.shape) == tensors[name].shape, name
            param.copy_(torch.from_numpy(tensors[name].astype(np.float64)))
    decays = {n for n, p in model.named_parameters() if p.dim() >= 2}
    assert decays == decay_names, f"decay sets differ: {sorted(decays ^ decay_names)}"

    idx = torch.from_numpy(tensors["idx"].astype(np.int64))
    targets = torch.from_numpy(tensors["targets"].astype(np.int64))
    p, seed, placement = train["dropout"], train["seed"], train["dropout_placement"]
    assert placement in ("residual", "nanogpt"), placement

    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [params[n] for n in names if n in decays], "weight_decay": train["weight_decay"]},
         {"params": [params[n] for n in names if n not in decays], "weight_decay": 0.0}],
        lr=train["lr"], betas=(train["beta1"], train["beta2"]), eps=train["eps"], foreach=False)
    out = dict(tensors)
    losses, norms = [], []
    for step in range(1, update_steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = model(idx, targets, Dropout(p, seed, step, placement))
        loss.backward()
        if step == 1:
            out["loss"] = np.array([loss.item()], dtype=np.float32)
            for n in names:
                out[f"grad.{n}"] = params[n].grad.numpy().astype(np.float32)
        clip = train["grad_clip"]
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        for group in opt.param_groups:
            group["lr"] = lr_at(train, step)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    out["losses"] = np.array(losses, dtype=np.float32)
    for n in names:
        out[f"after.{n}"] = params[n].detach().numpy().astype(np.float32)
    meta = dict(meta)
    meta["generated_by"] = "scripts/torch_fixtures.py, torch " + torch.__version__
    write_safetensors(out_path, out, meta)
    print(json.dumps({"fixture": out_path, "losses": losses, "grad_norms": norms,
                      "clipped": [n > train["grad_clip"] > 0 for n in norms],
                      "bytes": os.path.getsize(out_path)}))


def main(argv):
    if argv[:1] == ["--all"]:
        os.makedirs("tests/fixtures", exist_ok=True)
        for name, args in FIXTURES.items():
            state = f"/tmp/{name}.state.safetensors"
            subprocess.run(["cargo", "run", "--quiet", "--release", "--example", "fixture_state", "--", state, *args], check=True)
            compute(state, f"tests/fixtures/{name}.safetensors")
    elif len(argv) == 2:
        compute(*argv)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
