"""cuBLAS on the same products `matmul_bench` times, so each GPT shape is compared
with cuBLAS on that shape, not with a square one.

    python3 scripts/torch_matmul.py [--rows 16384] [--dtypes fp32,tf32,fp16]

For every layer GEMM of the shakespeare preset (k, n) over `rows` tokens:
forward out[m, n] = inp[m, k] @ weight[n, k]^T, dinp = dout[m, n] @ weight[n, k],
dweight = dout^T @ inp (n x k, reduced over m), as `benches/matmul_bench.rs` names
them. fp32 turns TF32 off (cuBLAS's true fp32 path), tf32 turns it on, fp16 runs
half operands with cuBLAS's default accumulation. Each product warms up, then runs
`reps` times between CUDA events; the figure is the median of 5 such timings.
Prints a table on stderr and one JSON object a line on stdout.
"""

import argparse
import json
import sys

import torch

GPT = [(384, 1152), (384, 384), (384, 1536), (1536, 384), (384, 65)]


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--dtypes", default="fp32,tf32,fp16")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{'op':<16}{'dtype':>6}{'m':>7}{'k':>6}{'n':>6}{'ms':>10}{'GFLOP/s':>11}", file=sys.stderr)
    for dtype in args.dtypes.split(","):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"
        elem = torch.float16 if dtype == "fp16" else torch.float32
        m = args.rows
        for k, n in GPT:
            g = torch.Generator(device=dev).manual_seed(0)
            inp = torch.rand(m, k, device=dev, generator=g, dtype=elem) * 2 - 1
            weight = torch.rand(n, k, device=dev, generator=g, dtype=elem) * 2 - 1
            dout = torch.rand(m, n, device=dev, generator=g, dtype=elem) * 2 - 1
            cases = [
                ("matmul_forward", lambda: inp @ weight.t()),
                ("matmul_dinp", lambda: dout @ weight),
                ("matmul_dweight", lambda: dout.t() @ inp),
            ]
            for op, fn in cases:
                ms = timed(fn, args.reps)
                gflops = 2.0 * m * k * n / (ms / 1e3) / 1e9
                print(f"{op:<16}{dtype:>6}{m:>7}{k:>6}{n:>6}{ms:>10.4f}{gflops:>11.0f}", file=sys.stderr)
                print(json.dumps({"runner": "torch_matmul", "op": op, "dtype": dtype, "m": m,
                                  "k": k, "n": n, "ms": ms, "gflops": gflops,
                                  "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
