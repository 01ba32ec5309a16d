#!/usr/bin/env python3
"""A PyTorch twin of `tidepool train --preset shakespeare`: the learning curve to compare.

    python3 scripts/torch_twin.py [CORPUS] [--steps 5000] [--eval-every 250]
        [--eval-batches 200] [--placement nanogpt|residual] [--dropout 0.2] [--seed 1337]

CORPUS defaults to the repository's data/tinyshakespeare.txt. Prints one JSON line per
evaluation, {"step", "val_loss", "train_loss", "train_loss_mean", "seconds"}, then a
last line with "final": true. fp32 (TF32 off), on CUDA when there is one.

What is the same as tidepool (src/data.rs, src/train.rs, src/model/mod.rs):
  - tokens: one per distinct character, sorted; the first 90% trains, the last 10%
    is held out;
  - the model: GPT-2 layout (biases, pre-LN blocks, tanh GELU, LayerNorm eps 1e-5, head
    tied to wte), 6 layers, 6 heads, width 384, context 256, batch 64, and its initial
    weights: tidepool's own (SplitMix64 + Box-Muller from the seed, N(0, 0.02),
    residual projections N(0, 0.02 / sqrt(2 layers)));
  - the training windows (tidepool's batcher, seed ^ 0xBA7C4) and the held-out windows
    (EVAL_SEED, the same batches at every evaluation), drawn by the same generator;
  - AdamW (betas 0.9 / 0.99, eps 1e-8, decoupled weight decay 0.1 on matrices and
    embeddings only), global-norm clipping at 1.0, the schedule (1-based step: linear
    warmup over 100 steps to 1e-3, cosine to 1e-4 at step 5000);
  - dropout 0.2 on the embeddings and both residual branches, and with placement
    nanogpt (the preset's) on the attention probabilities.
What differs: the dropout masks come from PyTorch's RNG (a statistical twin, not a
bitwise one), and PyTorch's kernels sum in another order. "train_loss" is the loss of
the evaluation's step, with dropout, as tidepool's per-step "loss"; "train_loss_mean"
averages the steps since the previous evaluation.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

GOLDEN = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1
EVAL_SEED = 0xE7A15EED  # src/train.rs EVAL_SEED
BATCH_SEED_XOR = 0xBA7C4  # src/train.rs Trainer::new


def splitmix(states):
    """SplitMix64's output for the given states (numpy uint64, wrapping arithmetic)."""
    z = states.copy()
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class Rng:
    """tidepool's src/rng.rs: SplitMix64, vectorised (state after k draws is seed + k * golden)."""

    def __init__(self, seed):
        self.state = seed & M64

    def draw(self, n):
        with np.errstate(over="ignore"):
            k = np.arange(1, n + 1, dtype=np.uint64)
            states = np.uint64(self.state) + k * np.uint64(GOLDEN)
            out = splitmix(states)
        self.state = (self.state + n * GOLDEN) & M64
        return out

    def below(self, n, count):
        """`count` draws of Rng::below(n): (u >> 11) / 2^53 * n, truncated."""
        u = (self.draw(count) >> np.uint64(11)).astype(np.float64)
        return (u / float(1 << 53) * float(n)).astype(np.int64)

    def normal(self, count):
        """`count` draws of Rng::normal (Box-Muller, two u64 each), as float32."""
        u = (self.draw(2 * count) >> np.uint64(11)).astype(np.float64)
        u1 = (u[0::2] + 1.0) / (float(1 << 53) + 1.0)
        u2 = u[1::2] / float(1 << 53)
        return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * math.pi * u2)).astype(np.float32)


class Block(nn.Module):
    def __init__(self, c, heads, p, attn_dropout, fused=True):
        super().__init__()
        self.heads, self.p, self.attn_dropout, self.fused = heads, p, attn_dropout, fused
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(c, 3 * c)
        self.attn.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(c, 4 * c)
        self.mlp.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        p_att = self.p if (self.training and self.attn_dropout) else 0.0
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_att, is_causal=True)
        else:
            # the t x t attention matrix in memory, as eager PyTorch without SDPA keeps it
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = F.dropout(att.masked_fill(~causal, float("-inf")).softmax(dim=-1), p_att, True)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + F.dropout(self.attn.c_proj(y), self.p, self.training)
        m = self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + F.dropout(m, self.p, self.training)


class GPT(nn.Module):
    """fused: attention by F.scaled_dot_product_attention; else written out (matrix,
    mask, softmax, dropout), the eager path without fused kernels."""

    def __init__(self, vocab, context, layers, heads, width, p, attn_dropout, fused=True):
        super().__init__()
        self.p = p
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, width)
        self.transformer.wpe = nn.Embedding(context, width)
        self.transformer.h = nn.ModuleList([Block(width, heads, p, attn_dropout, fused) for _ in range(layers)])
        self.transformer.ln_f = nn.LayerNorm(width, eps=1e-5)

    def forward(self, idx, targets):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1], device=idx.device))
        x = F.dropout(x, self.p, self.training)
        for block in tr.h:
            x = block(x)
        logits = tr.ln_f(x) @ tr.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def tidepool_init(model, seed, layers):
    """GptConfig::init: tensors in nanoGPT state-dict order, one normal per element of
    the normal-initialised ones (matrices and embeddings), ones/zeros for the rest."""
    rng = Rng(seed)
    proj_std = np.float32(0.02) / np.float32(math.sqrt(2 * layers))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                param.fill_(1.0)
            elif param.dim() == 1:
                param.zero_()
            else:
                std = proj_std if name.endswith("c_proj.weight") else np.float32(0.02)
                values = rng.normal(param.numel()) * std
                param.copy_(torch.from_numpy(values.reshape(tuple(param.shape))))


def lr_at(step, lr, warmup, steps):
    """tidepool's TrainConfig::lr_at at 1-based step."""
    min_lr = lr / 10
    if step <= warmup:
        return lr * step / max(warmup, 1)
    if step >= steps:
        return min_lr
    progress = (step - warmup) / max(steps - warmup, 1)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def windows(rng, tokens, batch, t, device):
    starts = rng.below(len(tokens) - t, batch)
    offsets = starts[:, None] + np.arange(t + 1)[None, :]
    rows = torch.from_numpy(tokens[offsets]).to(device)
    return rows[:, :t].contiguous(), rows[:, 1:].contiguous()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("corpus", nargs="?", default=os.path.join(here, "..", "data", "tinyshakespeare.txt"))
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-batches", type=int, default=200)
    ap.add_argument("--eval-chunk", type=int, default=8, help="held-out batches a forward pass (speed only)")
    ap.add_argument("--placement", choices=["nanogpt", "residual"], default="nanogpt")
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--max-seconds", type=float, default=float("inf"), help="stop after the evaluation that passes this")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop after the evaluation at this step; the schedule still runs to --steps")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(a.seed)

    text = open(a.corpus, encoding="utf-8").read()
    chars = sorted(set(text))
    ids = {ch: i for i, ch in enumerate(chars)}
    tokens = np.array([ids[ch] for ch in text], dtype=np.int64)
    split = len(tokens) * 9 // 10
    train, val = tokens[:split], tokens[split:]

    model = GPT(len(chars), a.context, a.layers, a.heads, a.width, a.dropout, a.placement == "nanogpt")
    tidepool_init(model, a.seed, a.layers)
    model.to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)

    # The held-out windows, drawn once: the same batches at every evaluation.
    eval_rng = Rng(EVAL_SEED)
    eval_batches = [windows(eval_rng, val, a.batch, a.context, device) for _ in range(a.eval_batches)]

    @torch.no_grad()
    def evaluate():
        model.eval()
        total = 0.0
        for i in range(0, len(eval_batches), a.eval_chunk):
            chunk = eval_batches[i:i + a.eval_chunk]
            x = torch.cat([c[0] for c in chunk])
            y = torch.cat([c[1] for c in chunk])
            # equal-sized batches: the mean over the chunk is the mean of its batch means
            total += model(x, y).item() * len(chunk)
        model.train()
        return total / len(eval_batches)

    batch_rng = Rng(a.seed ^ BATCH_SEED_XOR)
    start = time.time()
    recent = []
    step = 0
    for step in range(1, a.steps + 1):
        x, y = windows(batch_rng, train, a.batch, a.context, device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            recent.append(loss.item())
            line = {"step": step, "val_loss": round(evaluate(), 5), "train_loss": round(recent[-1], 5),
                    "train_loss_mean": round(sum(recent) / len(recent), 5), "seconds": round(time.time() - start, 1)}
            print(json.dumps(line), flush=True)
            recent = []
            if time.time() - start > a.max_seconds or step == a.stop_after:
                break
        elif step % 10 == 0:
            recent.append(loss.item())  # a sync every 10 steps keeps the queue short
    print(json.dumps({"final": True, "steps": step, "seconds": round(time.time() - start, 1), "device": device,
                      "torch": torch.__version__, "placement": a.placement, "eval_batches": a.eval_batches}), flush=True)


if __name__ == "__main__":
    main()
