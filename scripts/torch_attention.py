#!/usr/bin/env python3
"""PyTorch's fused causal attention on the shapes `matmul_bench` times tidepool's
attention on, so the two are compared in one call (scripts/gpu-run.sh gemm-sweep).

    python3 scripts/torch_attention.py [--batch 64] [--context 256] [--width 384]
        [--heads 6] [--dtypes fp32,fp16] [--reps 50]

q, k and v are views of one [batch, context, 3 * width] tensor, split into heads as
the model does. attention_forward: F.scaled_dot_product_attention(is_causal=True),
without autograd; attention_backward: the gradients of q, k and v from one recorded
forward (the graph kept, so each repetition is the backward alone). fp32 turns TF32
off. Each is warmed up, then timed as torch_matmul.py times: `reps` launches between
CUDA events, the median of 5. Prints a table on stderr and one JSON object a line
on stdout, with the op names and m / k / n of matmul_bench's attention rows
(batch x heads, context, head size).
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from torch_matmul import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--dtypes", default="fp32,fp16")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    b, t, c, nh = args.batch, args.context, args.width, args.heads
    if c % nh:
        sys.exit(f"--width {c} is not a multiple of --heads {nh}")
    hs = c // nh
    dev = torch.device("cuda")
    # Causal: t(t+1)/2 scores a head; the forward 2 products of hs each, the
    # backward 5 (as matmul_bench counts them).
    pairs = b * nh * t * (t + 1) / 2
    flops = {"attention_forward": 4.0 * pairs * hs, "attention_backward": 10.0 * pairs * hs}
    print(f"{'op':<20}{'dtype':>6}{'ms':>10}{'GFLOP/s':>11}", file=sys.stderr)
    for dtype in args.dtypes.split(","):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        elem = torch.float16 if dtype == "fp16" else torch.float32
        g = torch.Generator(device=dev).manual_seed(0)
        qkv = (torch.rand(b, t, 3 * c, device=dev, generator=g, dtype=elem) * 4 - 2).requires_grad_()
        q, k, v = (x.view(b, t, nh, hs).transpose(1, 2) for x in qkv.split(c, dim=2))
        dout = torch.rand(b, nh, t, hs, device=dev, generator=g, dtype=elem) * 2 - 1

        def forward():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def backward():
            return torch.autograd.grad(out, qkv, dout, retain_graph=True)

        for op, fn in [("attention_forward", forward), ("attention_backward", backward)]:
            ms = timed(fn, args.reps)
            gflops = flops[op] / (ms / 1e3) / 1e9
            print(f"{op:<20}{dtype:>6}{ms:>10.4f}{gflops:>11.0f}", file=sys.stderr)
            print(json.dumps({"runner": "torch_attention", "op": op, "dtype": dtype, "m": b * nh,
                              "k": t, "n": hs, "ms": ms, "gflops": gflops,
                              "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
