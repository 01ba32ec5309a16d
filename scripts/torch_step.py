#!/usr/bin/env python3
"""PyTorch's training step on tidepool's presets: the yardstick of the `step-vs-torch`
and `memory` suites (scripts/gpu-run.sh).

    python3 scripts/torch_step.py [--preset shakespeare] [--modes fp32,fp32_fused,...]
        [--steps 20] [--warmup 5] [--dropout P]

The model is torch_twin.py's: tidepool's layout (GPT-2 with biases, pre-LN, tanh GELU,
head tied to the token embedding) with the preset's layers, heads, width, context,
batch and dropout (0.2 where nanoGPT places it for shakespeare; `--dropout` overrides).
A step is what `tidepool bench step` times: forward, backward, global-norm clipping
and AdamW, on a fresh random batch each step (no data loading in the timed loop).

Modes, each in a model of its own, one after the other:
  fp32           attention written out (matrix, mask, softmax): eager PyTorch without
                 fused attention, TF32 off
  fp32_fused     fp32 with F.scaled_dot_product_attention
  fp32_compiled  fp32_fused under torch.compile (the first steps compile: warm-up)
  tf32           fp32_fused with TF32 matmuls
  bf16           fp32_fused under bf16 autocast
Each prints one JSON line: ms a step (`median_ms`: the median of the timed steps by
CUDA events, recorded without waiting between steps, so the host runs ahead as in
training; `mean_ms`: the timed steps' wall time over their number), tokens a second,
and PyTorch's peak memory over the timed steps: `max_allocated` (bytes of live
tensors, beside tidepool's bytes in use) and `max_reserved` (what its caching
allocator held, beside tidepool's peak reserved).
"""
import argparse
import json
import sys
import time

import torch

from torch_twin import GPT

# tidepool's presets (src/config: TrainConfig::preset): layers, heads, width,
# context, batch, dropout, dropout on the attention probabilities too
PRESETS = {
    "tiny": (2, 4, 64, 64, 8, 0.0, False),
    "small": (4, 4, 128, 128, 16, 0.0, False),
    "shakespeare": (6, 6, 384, 256, 64, 0.2, True),
}
VOCAB = 65  # Tiny Shakespeare's characters
MODES = ["fp32", "fp32_fused", "fp32_compiled", "tf32", "bf16"]


def measure(mode, preset, steps, warmup, dropout):
    layers, heads, width, context, batch, p, attn_dropout = PRESETS[preset]
    if dropout is not None:
        p = dropout
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.manual_seed(1337)
    model = GPT(VOCAB, context, layers, heads, width, p, attn_dropout, fused=mode != "fp32").cuda()
    model.train()
    decay = [w for w in model.parameters() if w.dim() >= 2]
    rest = [w for w in model.parameters() if w.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), eps=1e-8, fused=True)
    forward = torch.compile(model) if mode == "fp32_compiled" else model

    def step():
        idx = torch.randint(0, VOCAB, (batch, context), device="cuda")
        targets = torch.randint(0, VOCAB, (batch, context), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = forward(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    wall = time.perf_counter()
    for start, end in zip(starts, ends):
        start.record()
        loss = step()
        end.record()
    torch.cuda.synchronize()
    wall = time.perf_counter() - wall
    times = sorted(start.elapsed_time(end) for start, end in zip(starts, ends))
    ms = times[len(times) // 2]
    row = {
        "runner": "torch", "preset": preset, "mode": mode, "steps": steps, "median_ms": round(ms, 3),
        "mean_ms": round(wall * 1e3 / steps, 3),
        "tokens_per_s": round(batch * context / (ms / 1e3)), "loss": round(loss.item(), 4), "dropout": p,
        "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
    }
    del model, opt, forward
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="shakespeare")
    ap.add_argument("--modes", default="fp32,fp32_fused,tf32,bf16",
                    help="comma-separated, of: " + ", ".join(MODES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dropout", type=float, help="instead of the preset's")
    a = ap.parse_args()
    modes = a.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        sys.exit(f"torch_step.py: unknown mode {', '.join(unknown)} (modes: {', '.join(MODES)})")
    if not torch.cuda.is_available():
        sys.exit("torch_step.py: no CUDA device")
    for mode in modes:
        print(json.dumps(measure(mode, a.preset, a.steps, max(a.warmup, 1), a.dropout)), flush=True)


if __name__ == "__main__":
    main()
