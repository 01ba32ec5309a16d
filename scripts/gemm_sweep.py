#!/usr/bin/env python3
"""The gemm-sweep suite's tables (scripts/gpu-run.sh gemm-sweep), from its
results.jsonl: every GEMM variant on every shape beside cuBLAS, the winner of each
shape class with the line that puts it into src/kernels/matmul/choice.rs
(GPU_CHOICE), and attention beside PyTorch's fused attention.

    python3 scripts/gemm_sweep.py results.jsonl > sweep.md

A variant's figure is `ms (x)`: its time and cuBLAS's time over it on that shape
(1.00: as fast as cuBLAS; the issue's target is 0.80 or more), fp32 cuBLAS for the
f32 variants and fp16 for the f16 ones. `*` marks the variant the launchers choose
today. A class's winner is the variant with the least time summed over the class's
shapes, among the variants measured on all of them. For f16 the launchers use one
tensor-core core for every product, so the f16 tables end with each core's time over
all the shapes, split where the launchers split, and the line that makes the fastest
the default.
"""

import json
import sys
from collections import defaultdict

F32 = ["tiled", "splitk", "narrow"]
F16 = ["f16", "f16-splitk", "coop", "coop-splitk", "coop2", "coop2-splitk", "coop3", "coop3-splitk"]
# The tensor-core cores, one of which the launchers use for every f16 product
# (DEFAULT_TENSOR_CORE in src/kernels/matmul/variant.rs), split or not as the f32
# chooser says.
CORES = ["coop", "coop2", "coop3"]


def ident(name):
    """A variant's or class's name as its Rust identifier (warp-splitk -> WarpSplitK)."""
    return "".join(w.capitalize() if w != "splitk" else "SplitK" for w in name.split("-"))


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
    gemm = [r for r in rows if r.get("op", "").startswith("matmul") and "variant" in r and "ms" in r]
    cublas = {(r["op"], r["m"], r["k"], r["n"], r["dtype"]): r["ms"]
              for r in rows if r.get("runner") == "torch_matmul"}
    shapes = sorted({(r["op"], r["m"], r["k"], r["n"]) for r in gemm}, key=lambda s: (s[2], s[3], s[0]))
    by = {(r["op"], r["m"], r["k"], r["n"], r["variant"]): r for r in gemm}
    for family, names, dtype in [("f32", F32, "fp32"), ("f16", F16, "fp16")]:
        names = [v for v in names if any(r["variant"] == v for r in gemm)]
        if not names:
            continue
        print(f"## GEMMs, {family} variants beside cuBLAS {dtype}\n")
        print("| op | m | k | n | class | cuBLAS ms | " + " | ".join(names) + " | best |")
        print("| --- | ---: | ---: | ---: | --- | ---: | " + " | ".join("---:" for _ in names) + " | --- |")
        per_class = defaultdict(lambda: defaultdict(list))
        chosen = {}
        for op, m, k, n in shapes:
            base = cublas.get((op, m, k, n, dtype))
            cells, best, klass = [], None, ""
            for v in names:
                r = by.get((op, m, k, n, v))
                if r is None:
                    cells.append("")
                    continue
                klass = r.get("class", "")
                per_class[klass][v].append(r["ms"])
                if r.get("auto"):
                    chosen[klass] = v
                ratio = f" ({base / r['ms']:.2f})" if base else ""
                cells.append(f"{r['ms']:.3f}{ratio}{' *' if r.get('auto') else ''}")
                if best is None or r["ms"] < best[1]:
                    best = (v, r["ms"])
            if best is None:
                continue
            base_cell = f"{base:.3f}" if base else "-"
            print(f"| {op} | {m} | {k} | {n} | {klass} | {base_cell} | " + " | ".join(cells) + f" | {best[0]} |")
        print()
        print(f"### {family}: each class's winner (least time summed over its shapes)\n")
        print("| class | shapes | today | today's ms | winner | winner's ms | GPU_CHOICE line |")
        print("| --- | ---: | --- | ---: | --- | ---: | --- |")
        for klass, times in sorted(per_class.items()):
            count = max(len(t) for t in times.values())
            full = {v: sum(t) for v, t in times.items() if len(t) == count}
            if not full:
                continue
            winner = min(full, key=full.get)
            today = chosen.get(klass, "")
            today_ms = f"{full[today]:.3f}" if today in full else "-"
            line = f"`(ShapeClass::{ident(klass)}, MatmulVariant::{ident(winner)}),`" if family == "f32" else "-"
            print(f"| {klass} | {count} | {today} | {today_ms} | {winner} | {full[winner]:.3f} | {line} |")
        print()
        if family == "f16":
            core_totals(gemm, shapes, by)

    # Ours: one row an op and set of kernels (paired, tiled; `*` the launchers' choice),
    # from the suite's attention run, else from the end of the GEMM sweep.
    timed = [r for r in rows if r.get("op", "").startswith("attention") and "ms" in r]
    ours = [r for r in timed if r.get("run") == "attention"] or \
        [r for r in timed if r.get("run") == "matmul"]
    theirs = {(r["op"], r["dtype"]): r["ms"] for r in rows if r.get("runner") == "torch_attention"}
    if ours or theirs:
        print("## Attention beside PyTorch's fused attention (F.scaled_dot_product_attention)\n")
        print("`*`: the kernels the launchers choose (GPU_ATTENTION in src/kernels/attention.rs).\n")
        print("| op | kernels | tidepool f32 ms | PyTorch fp32 ms | PyTorch / tidepool | PyTorch fp16 ms |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        cell = lambda x: f"{x:.3f}" if x else "-"
        for op in ["attention_forward", "attention_backward"]:
            b, h = theirs.get((op, "fp32")), theirs.get((op, "fp16"))
            mine = [r for r in ours if r["op"] == op] or [{}]
            for r in mine:
                a = r.get("ms")
                kernels = (r.get("variant") or "-") + (" *" if r.get("auto") else "")
                ratio = f"{b / a:.2f}" if a and b else "-"
                print(f"| {op} | {kernels} | {cell(a)} | {cell(b)} | {ratio} | {cell(h)} |")
        print()


def core_totals(gemm, shapes, by):
    """Each tensor-core core's ms summed over the shapes, each product split where
    the launchers' choice (`auto`) is split: what the core would cost as the default."""
    split = {(r["op"], r["m"], r["k"], r["n"]) for r in gemm
             if r.get("auto") and r["variant"] in F16 and r["variant"].endswith("-splitk")}
    totals = {}
    for core in CORES:
        total = 0.0
        for shape in shapes:
            r = by.get(shape + (core + ("-splitk" if shape in split else ""),))
            if r is None:
                break
            total += r["ms"]
        else:
            totals[core] = total
    if not totals:
        return
    best = min(totals, key=totals.get)
    # 2 m k n flops a product; over ms, / 1e9 gives TFLOP/s.
    flops = sum(2 * m * k * n for _, m, k, n in shapes)
    print("### f16: each tensor-core core as the default (every shape, split as the launchers split)\n")
    print("| core | ms over all shapes | TFLOP/s over all shapes | DEFAULT_TENSOR_CORE line |")
    print("| --- | ---: | ---: | --- |")
    for core, total in totals.items():
        line = f"`const DEFAULT_TENSOR_CORE: F16Core = F16Core::{ident(core)};`" if core == best else ""
        print(f"| {core} | {total:.3f} | {flops / total / 1e9:.1f} | {line} |")
    print()


if __name__ == "__main__":
    main()
