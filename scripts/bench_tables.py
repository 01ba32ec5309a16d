#!/usr/bin/env python3
"""Markdown tables from the JSON lines scripts/gpu-run.sh writes:

    python3 scripts/bench_tables.py results.jsonl [--info info.txt]

One section a suite found in the file (each line carries its `suite`, `run` and
`build`: `this`, or `against` for the earlier build of --against); the headline
suite's section is the README's table. Medians are over a suite's repeats; ranges
give the lowest and highest repeat. A suite whose runs failed or were skipped gets a
line saying so instead of its table.
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict

BUILDS = ("this", "against")


def load(path):
    lines = []
    with open(path) as f:
        for text in f:
            text = text.strip()
            if text.startswith("{"):
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError:
                    pass  # cut off by a timeout
    return lines


def info_fields(path):
    fields = {}
    if path:
        with open(path) as f:
            for text in f:
                key, sep, value = text.partition(": ")
                if sep and key in ("date", "machine"):
                    fields[key] = value.strip()
    return fields


def table(head, rows, numbers=True):
    """A Markdown table; columns after the first are right-aligned where they hold numbers."""
    align = ["---"] + ["---:" if numbers else "---"] * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def f(x, digits=3):
    return "" if x is None else f"{x:.{digits}f}"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs, digits=3):
    xs = [x for x in xs if x is not None]
    if not xs:
        return ""
    lo, hi = min(xs), max(xs)
    return f"{lo:.{digits}f}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else f"{lo:.{digits}f}-{hi:.{digits}f}"


def gb(n):
    return "" if n is None else f"{n / 1e9:.3f} GB"


def repeat_of(run):
    m = re.search(r"_(\d+)$", run)
    return int(m.group(1)) if m else 1


class Suite:
    def __init__(self, name, lines):
        self.name = name
        self.lines = [l for l in lines if l.get("suite") == name]

    def rows(self, run=None, build="this", where=lambda l: True):
        """Output lines (not the command records) of runs named `run` (a regex)."""
        return [l for l in self.lines if "command" not in l and "skipped" not in l
                and (run is None or re.fullmatch(run, l.get("run", "")))
                and l.get("build") == build and where(l)]

    def failures(self):
        bad = [f"`{l['run']}` ({l['build']}) exited {l['exit']}" for l in self.lines if l.get("exit", 0) != 0]
        bad += [f"`{l.get('run', l.get('skipped'))}` skipped: {l.get('why', l.get('skipped'))}" for l in self.lines if "skipped" in l]
        return bad

    def builds(self):
        return [b for b in BUILDS if any(l.get("build") == b for l in self.lines)]


def step_rows(suite, run, build):
    return [l for l in suite.rows(run, build) if "variant" in l and "median_ms" in l]


def torch_rows(suite, run, build="torch"):
    return [l for l in suite.rows(run, build) if l.get("runner") == "torch"]


def step_vs_torch(s):
    out = []
    torch = {(r["preset"], r["mode"]): r for r in torch_rows(s, r"torch_.*")}
    presets = sorted({p for p, _ in torch} | {l["preset"].split()[0] for b in s.builds() for l in step_rows(s, r"step_.*", b)})
    for preset in presets:
        base = torch.get((preset, "fp32"))
        rows = []
        for (p, mode), r in torch.items():
            if p == preset:
                rows.append([f"PyTorch {mode}", f(r["median_ms"], 2), f"{r['tokens_per_s']:,}", "",
                             f(base["median_ms"] / r["median_ms"], 2) if base else ""])
        for b in s.builds():
            for r in step_rows(s, r"step_.*", b):
                if r["preset"].split()[0] != preset:
                    continue
                precision = "f16" if r["preset"].endswith("f16") else "f32"
                if "f32_attention" in r.get("run", ""):
                    precision += " with attention in f32"
                if "f16_weights" in r.get("run", ""):
                    precision += " reading the weights' f16 copy"
                name = f"tidepool {precision}, {r['variant']}" + (" (earlier build)" if b == "against" else "")
                rows.append([name, f(r["median_ms"], 2), f"{round(r['tokens_per_s']):,}", f(r["buffers_created_per_step"], 0),
                             f(base["median_ms"] / r["median_ms"], 2) if base else ""])
        if rows:
            out.append(f"**{preset}**, ms a step (median):\n\n" + table(
                ["what", "ms a step", "tokens/s", "buffers created a step", "x PyTorch fp32 eager"], rows))
    # the page's presets as the page trains them
    rows = []
    for b in s.builds():
        for r in step_rows(s, "page_presets", b):
            fused = torch.get((r["preset"], "fp32_fused"))
            rows.append([r["preset"] + (" (earlier build)" if b == "against" else ""), r["variant"], f(r["median_ms"]),
                         f(fused["median_ms"]) if fused else "", f(fused["median_ms"] / r["median_ms"], 2) if fused else ""])
    if rows:
        out.append("The page's presets, calls of several steps:\n\n" + table(
            ["preset", "calls", "tidepool ms a step", "PyTorch fp32 fused ms", "x PyTorch"], rows))
    # STEP_QUICK's peaks of a 3-step run beside PyTorch's over its timed steps
    rows = []
    for (p, mode), r in torch.items():
        if "max_reserved" in r and any(s.rows(f"peaks_{p}", b) for b in s.builds()):
            rows.append([f"PyTorch {mode} ({p})", gb(r.get("max_allocated")), "", gb(r["max_reserved"])])
    for b in s.builds():
        for r in s.rows(r"peaks_.*", b):
            if "peak_bytes_reserved" in r:
                rows.append([f"tidepool {r.get('preset', '')}, {r.get('policy', '')}" + (" (earlier build)" if b == "against" else ""),
                             gb(r.get("peak_bytes_in_use")), gb(r.get("peak_bytes_requested")), gb(r["peak_bytes_reserved"])])
    if rows:
        out.append("Peak memory:\n\n" + table(["what", "in use (tensors)", "requested", "reserved"], rows))
    for run, what in (("kernels", ""), ("kernels_f32_attention", ", attention in f32 (--f16-attention false)")):
        kernels = [r for r in s.rows(run) if "kernel" in r]
        if not kernels:
            continue
        by = defaultdict(dict)
        for r in kernels:
            by[r["kernel"]][r["preset"]] = r
        cols = sorted({r["preset"] for r in kernels})
        order = sorted(by, key=lambda k: -max(x["ms_per_step"] for x in by[k].values()))
        rows = [[k, f(next(iter(by[k].values()))["launches_per_step"], 0)] + [f(by[k][c]["ms_per_step"]) if c in by[k] else "" for c in cols]
                for k in order[:14]]
        out.append(f"GPU ms a step by kernel{what} (each dispatch timed in a pass of its own):\n\n"
                   + table(["kernel", "launches"] + cols, rows))
    return out


def is_f16(variant):
    return variant.startswith("f16") or variant.startswith("coop")


def gemm_vs_cublas(s):
    cublas = defaultdict(dict)
    for r in s.rows("cublas", "torch"):
        if r.get("runner") == "torch_matmul":
            cublas[(r["op"], r["m"], r["k"], r["n"])][r["dtype"]] = r["gflops"]
    out = []
    for b in s.builds():
        best = defaultdict(dict)
        for r in s.rows("matmul", b):
            if "gflops" not in r or not r.get("auto"):
                continue
            kind = "f16" if is_f16(r["variant"]) else "f32"
            key = (r["op"], r["m"], r["k"], r["n"])
            if r["gflops"] > best[key].get(kind, (0, ""))[0]:
                best[key][kind] = (r["gflops"], r["variant"])
        rows, ratios = [], []
        for key in sorted(best, key=lambda k: (k[2], k[3], k[0])):
            op, m, k, n = key
            ours, theirs = best[key].get("f32"), cublas.get(key, {})
            ratio = ours[0] / theirs["fp32"] if ours and "fp32" in theirs else None
            if ratio:
                ratios.append(ratio)
            half = best[key].get("f16")
            rows.append([f"{m} x {k} -> {n}", op.replace("matmul_", ""), ours[1] if ours else "",
                         f(ours[0] / 1e3, 1) if ours else "", f(theirs.get("fp32", 0) / 1e3, 1) if "fp32" in theirs else "",
                         f(ratio, 2) if ratio else "", f(half[0] / 1e3, 1) if half else "",
                         f(theirs["fp16"] / 1e3, 0) if "fp16" in theirs else ""])
        if rows:
            title = "TFLOP/s of the variant the launchers pick" + (" (earlier build)" if b == "against" else "")
            if ratios:
                title += f"; f32 against cuBLAS fp32 on {len(ratios)} shapes: {min(ratios):.2f}-{max(ratios):.2f}"
            out.append(title + ":\n\n" + table(["shape (m x k -> n)", "op", "picked", "f32", "cuBLAS fp32", "f32 / cuBLAS",
                                                "f16 tensor cores", "cuBLAS fp16"], rows))
    return out


def gemm_ceiling(s):
    """benches/gemm_ceiling.rs: each GEMM core's loop with parts taken away."""
    rows = [[r["family"], r["probe"], r["threads"], f(r["ms"]), f(r["tflops"], 1)]
            for r in s.rows("gemm_ceiling") if "tflops" in r and "family" in r]
    if not rows:
        return []
    return ["Each GEMM core's own loop with parts taken away (`benches/gemm_ceiling.rs`):\n\n"
            + table(["core", "the loop with", "threads", "ms", "TFLOP/s"], rows)]


def kernel_stats(s):
    """benches/kernel_stats.rs: the driver's statistics of each kernel and the occupancy they allow."""
    out = []
    for b in ("this", "against"):
        lines = s.rows("kernel_stats", build=b, where=lambda l: "kernel" in l)
        if not lines:
            continue
        names = sorted({k for l in lines for k in l["stats"]})
        rows = []
        for l in lines:
            occupancy = (f"{l['sm90_workgroups_by_registers']} / {l['sm90_workgroups_by_shared']} / "
                         f"{l['sm90_workgroups']}" if l.get("sm90_workgroups") is not None else "")
            rows.append([l["kernel"], l["threads"], l["shared_bytes"]]
                        + [f(l["stats"][n], 0) if isinstance(l["stats"].get(n), (int, float)) else l["stats"].get(n, "")
                           for n in names]
                        + [occupancy, l.get("sm90_warps") or ""])
        title = f"{lines[0]['adapter']} ({lines[0]['driver']})" + (" (earlier build)" if b == "against" else "")
        out.append(title + "; workgroups an SM by registers / by shared memory / in all, counted with an SM of "
                   "compute capability 9.0:\n\n"
                   + table(["kernel", "threads", "shared bytes"] + names + ["workgroups an SM", "warps an SM"], rows))
    return out


def attention_vs_torch(s):
    """Each build's GPU attention kernel sets beside PyTorch's fused attention, then the
    step one step a call: medians over the repeats, the builds side by side."""
    theirs = {(r["op"], r["dtype"]): r["ms"] for r in s.rows("torch_attention", "torch")
              if r.get("runner") == "torch_attention"}
    builds = s.builds()
    name = lambda b: "this build" if b == "this" else "earlier build"
    ours = defaultdict(list)
    for b in builds:
        for r in s.rows(r"attention_\d+", b):
            if r.get("op", "").startswith("attention") and "ms" in r:
                ours[(r["op"], r["variant"] + (" *" if r.get("auto") else ""), b)].append(r["ms"])
    out = []
    keys = sorted({(op, v) for op, v, _ in ours}, key=lambda k: (k[0] != "attention_forward", k[1]))
    rows = []
    for op, kernels in keys:
        mine = [ours.get((op, kernels, b), []) for b in builds]
        # The tensor-core kernels (`coop`) against PyTorch's fp16 attention, the others fp32.
        dtype = "fp16" if kernels.startswith("coop") else "fp32"
        torch = theirs.get((op, dtype))
        rows.append([op, kernels] + [f"{f(med(m))} ({spread(m)})" if m else "" for m in mine]
                    + [f"{f(torch)} ({dtype})" if torch else "", f(torch / med(mine[0]), 2) if torch and mine[0] else ""])
    if rows:
        out.append("Attention on the shape `matmul_bench --only attention` times (on a GPU the shakespeare step's heads), "
                   "ms (the spread over the repeats); `*`: the kernels "
                   "the launchers choose; `coop` (f16 on tensor cores) beside PyTorch fp16:\n\n"
                   + table(["op", "kernels"] + [name(b) for b in builds]
                           + ["PyTorch fused", "PyTorch / this build"], rows))
    steps = defaultdict(list)
    for b in builds:
        for r in step_rows(s, r"step_\d+", b):
            steps[(r["preset"], b)].append(r["median_ms"])
    presets = sorted({p for p, _ in steps})
    rows = [[p] + [f"{f(med(steps[(p, b)]), 2)} ({spread(steps[(p, b)], 2)})" if steps.get((p, b)) else "" for b in builds]
            for p in presets]
    if rows:
        out.append("The step one step a call, median ms (the spread over the repeats):\n\n"
                   + table(["preset"] + [name(b) for b in builds], rows))
    return out


def native_calls(s, run, build):
    """(preset, in_flight) -> [median ms of each repeat] from `bench step --at-once N --in-flight 1,2`."""
    got = defaultdict(list)
    for r in step_rows(s, run, build):
        k = 2 if "2 in flight" in r["variant"] else 1
        got[(r["preset"], k)].append(r["median_ms"])
    return got


def dawn_calls(s, run, build):
    got = defaultdict(list)
    for r in s.rows(run, build):
        if r.get("runner") == "dawn" and "median_ms" in r and "bench" not in r:
            got[(r["preset"], r.get("in_flight", 1))].append(r["median_ms"])
    return got


def browser_vs_native(s):
    out = []
    for b in s.builds():
        native, dawn = native_calls(s, r"native_.*", b), dawn_calls(s, r"dawn_.*", b)
        page, loop = defaultdict(list), defaultdict(list)
        for r in s.rows(r"page_.*", b):
            if "median_ms" in r:
                page[(r["preset"], r["in_flight"])].append(r["median_ms"])
        for r in s.rows(r"loop_.*", b):
            if "wall_ms" in r:
                loop[(r["preset"], r["in_flight"])].append(r["wall_ms"])
        rows = []
        for key in sorted(set(native) | set(dawn), key=lambda k: (["tiny", "small"].index(k[0]) if k[0] in ("tiny", "small") else 2, k[1])):
            n, d, p, w = native.get(key, []), dawn.get(key, []), page.get(key, []), loop.get(key, [])
            ratios = [a / c for a, c in zip(n, d)]
            page_ratios = [a / c for a, c in zip(n, p)]
            rows.append([key[0], key[1], f(med(n)), f(med(d)), spread(ratios), f(med(p)) if p else "", spread(page_ratios),
                         f(med(w)) if w else ""])
        if rows:
            out.append("Median ms a step, calls of several steps, one call in flight or two"
                       + (" (earlier build)" if b == "against" else "") + "; ratios are native / browser build, per repeat; "
                       "the page's own loop is its wall time a step:\n\n"
                       + table(["preset", "in flight", "native", "Dawn in Node", "Dawn / native", "Chromium page", "page / native",
                                "page's own loop"], rows))
    return out


def memory(s):
    out = []
    rows = []
    torch = {r["mode"]: r for r in torch_rows(s, "torch")}
    for mode, r in torch.items():
        rows.append([f"PyTorch {mode}", gb(r["max_allocated"]), "", gb(r["max_reserved"]), f(r["max_reserved"] / r["max_allocated"])])
    fused = torch.get("fp32_fused")
    for b in s.builds():
        for r in s.rows(r"train_.*", b):
            if not r.get("final"):
                continue
            name = f"tidepool {r.get('policy', '')}" + (" (earlier build)" if b == "against" else "")
            res, use, req = r.get("peak_bytes_reserved"), r.get("peak_bytes_in_use"), r.get("peak_bytes_requested")
            rows.append([name, gb(use), gb(req), gb(res), f(res / use) if res and use else ""])
    if rows:
        note = ""
        if fused:
            ours = [r for r in s.rows("train_pow2_8") if r.get("final")]
            if ours:
                note = f"; pow2/8 reserves {1 - ours[0]['peak_bytes_reserved'] / fused['max_reserved']:.0%} less than PyTorch fp32_fused"
        out.append("Peak memory of a training step (PyTorch: max_memory_allocated / max_memory_reserved)" + note + ":\n\n"
                   + table(["what", "in use (tensors)", "requested", "reserved", "reserved / in use"], rows))
    steady = []
    for b in s.builds():
        for run, where in (("steady", "native"), ("steady_read_write", "native"), ("dawn_steady", "Dawn"),
                           ("dawn_steady_read_write", "Dawn")):
            for r in s.rows(run, b):
                if "peak_bytes_reserved" not in r:
                    continue
                bound = ", read_write" if r.get("bindings") == "read_write" else ""
                name = f"tidepool {r.get('policy', '')}{bound} ({where})" + (" (earlier build)" if b == "against" else "")
                steady.append([name, r.get("preset", ""), gb(r["peak_bytes_reserved"]), gb(r["peak_bytes_requested"]),
                               f(r["ratio"]), f(r.get("ms_per_step"), 2)])
    if steady:
        out.append("Steady training steps (peaks after warm-up; policy, reserved, requested, ratio, ms a step):\n\n"
                   + table(["policy", "preset", "reserved", "requested", "reserved / requested", "ms a step"], steady))
    out += kernels_by_binding(s)
    for run, what in (("replay", "The steady step's trace"), ("replay_planned", "The steady planned step's trace")):
        for r in s.rows(run):
            # `tidepool trace replay --json`: each recorded step with its replay.
            steps = r.get("steps") or r.get("data") or []
            for step in steps:
                replay = step.get("replay", step) if isinstance(step, dict) else None
                if not isinstance(replay, dict) or "first" in str(replay.get("label", "")):
                    continue
                rows = [[x["allocator"], f"{x['peak_bytes']:,}", f(x["ratio"])] for x in replay.get("rows", [])]
                if rows:
                    out.append(f"{what} replayed ({replay.get('tensors')} tensors), peak bytes:\n\n"
                               + table(["allocator", "peak bytes", "x lower bound"], rows))
    return out


def kernels_by_binding(s):
    """GPU ms a step per kernel under pow2/8 as declared, pow2/8 bound read_write,
    planned bound read_write (one set of arenas) and planned as declared (rivals
    apart): the first difference is the binding rule's cost, the second the arenas',
    the last what keeping the hot kernels' operands apart wins back."""
    out = []
    runs = (("kernels_pow2_8_declared", "pow2/8"), ("kernels_pow2_8_read_write", "pow2/8, read_write"),
            ("kernels_planned_read_write", "planned, read_write"), ("kernels_planned_declared", "planned"))
    for b, (prefix, where) in ((b, w) for b in s.builds() for w in (("", "native"), ("dawn_", "Dawn"))):
        ms = {label: {r["kernel"]: r for r in s.rows(prefix + run, b) if "kernel" in r} for run, label in runs}
        base = ms["pow2/8"]
        if not base:
            continue
        kernels = sorted(base, key=lambda k: (k != "all", -base[k]["ms_per_step"]))
        rows = []
        for k in kernels:
            got = [ms[label].get(k, {}).get("ms_per_step") for _, label in runs]
            diff = lambda a, b: got[a] - got[b] if None not in (got[a], got[b]) else None
            rows.append([k, f(base[k]["launches_per_step"], 0)] + [f(x) for x in got]
                        + [f(diff(1, 0)), f(diff(2, 1)), f(diff(3, 0))])
        steps = [f(next(iter(ms[label].values()), {}).get("step_ms"), 2) for _, label in runs]
        out.append(f"{where}: GPU ms a step per kernel, every dispatch timed in a pass of its own (step ms, timed: "
                   + ", ".join(f"{label} {st}" for (_, label), st in zip(runs, steps))
                   + (")" if b == "this" else ", earlier build)") + "; read_write - declared is what the binding "
                   "rule costs a kernel, planned rw - pow2/8 rw what the arenas' ranges cost, planned - pow2/8 "
                   "what the planned policy costs as it runs:\n\n"
                   + table(["kernel", "launches", "pow2/8", "pow2/8, read_write", "planned, read_write", "planned",
                            "read_write - declared", "planned rw - pow2/8 rw", "planned - pow2/8"], rows))
    return out


def pool(s):
    out = []
    for b in s.builds():
        for runner, run in (("native", r"native_\d+"), ("Dawn", r"dawn_\d+")):
            by = defaultdict(list)
            for r in s.rows(run, b):
                if "pool_median_ns" in r:
                    by[r["bytes"]].append(r)
            rows = []
            for size in sorted(by):
                rs = by[size]
                pool_ns, create_ns = med([r["pool_median_ns"] for r in rs]), med([r["create_median_ns"] for r in rs])
                rows.append([human_bytes(size), f(pool_ns, 0), f(create_ns, 0), ratio(create_ns / pool_ns),
                             f(med([r["dispatch_pooled_ns"] for r in rs]) / 1e3, 1), f(med([r["dispatch_fresh_ns"] for r in rs]) / 1e3, 1)])
            if rows:
                out.append(f"{runner}" + (" (earlier build)" if b == "against" else "") + ", medians over the repeats:\n\n"
                           + table(["size", "pool ns", "create + destroy ns", "ratio", "dispatch, pooled µs", "dispatch, fresh µs"], rows))
    return out


def soak(s):
    """The Dawn soak's rows (every `every` steps) and the native run's steps that created something."""
    out = []
    for r in s.rows("dawn"):
        if "rows" not in r:
            continue
        mib = lambda n: f(n / 2**20, 2)
        rows = [[x["step"], mib(x["bytes_held"]), x["buffers_created"], x["bind_groups_created"], x["pipelines_created"],
                 mib(x["wasm_memory"]), mib(x["js_heap"]) if x.get("js_heap") is not None else "", f(x["loss"])]
                for x in r["rows"]]
        verdict = "flat after warm-up" if r.get("flat") else f"NOT flat ({len(r.get('failures', []))} figures moved: `failures` in results.jsonl)"
        out.append(f"{r['runtime']}, {r['options']['preset']}, {r['options']['steps']} steps: {verdict}\n\n"
                   + table(["step", "MiB held", "buffers", "bind groups", "pipelines", "wasm MiB", "JS heap MiB", "loss"], rows))
    created = [r for r in s.rows("native") if "created" in r]
    out.append("Native steps after step 2 that created something: "
               + (", ".join(f"{r['step']} ({', '.join(k for k, v in r['created'].items() if any(v.values()))})" for r in created) or "none"))
    return out


def ratio(x):
    return f"{x:,.0f}x" if x >= 100 else f"{x:.1f}x"


def human_bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}"
    return f"{n} B"


def curve_points(s):
    ours = {r["step"]: r for r in s.rows("tidepool") if "step" in r and not r.get("final") and r.get("val_loss") is not None}
    twin = {r["step"]: r for r in s.rows("twin", "torch") if "val_loss" in r and not r.get("final")}
    return ours, twin


def curves(s):
    ours, twin = curve_points(s)
    steps = sorted(set(twin) | {k for k in ours if not twin or k in twin})
    rows, gap = [], (0.0, None)
    for step in steps:
        o, t = ours.get(step), twin.get(step)
        d = o["val_loss"] - t["val_loss"] if o and t else None
        if d is not None and step <= 2000 and abs(d) >= abs(gap[0]):
            gap = (d, step)
        rows.append([step, f(o["loss"]) if o else "", f(o["val_loss"]) if o else "", f(t["train_loss"]) if t else "",
                     f(t["val_loss"]) if t else "", f"{d:+.3f}" if d is not None else ""])
    if not rows:
        return []
    text = table(["step", "tidepool train loss", "tidepool held-out", "PyTorch train loss", "PyTorch held-out", "difference"], rows)
    best = lambda pts: min((r["val_loss"], k) for k, r in pts.items()) if pts else None
    notes = []
    if best(ours):
        notes.append("best held-out: tidepool {:.3f} (step {})".format(*best(ours)))
    if best(twin):
        notes.append("PyTorch {:.3f} (step {})".format(*best(twin)))
    if gap[1]:
        notes.append(f"largest difference up to step 2000: {gap[0]:+.3f} (step {gap[1]})")
    return [text + "\n\n" + "; ".join(notes)]


def f16_curves(s):
    modes = ("f32", "f16", "f16_attention")
    runs = {m: {r["step"]: r for r in s.rows(m) if "step" in r and not r.get("final") and r.get("val_loss") is not None}
            for m in modes}
    rows = []
    for step in sorted(set().union(*runs.values())):
        loss = [runs[m][step]["val_loss"] if step in runs[m] else None for m in modes]
        rows.append([step] + [f(x, 4) for x in loss] + [
            f"{loss[1] - loss[0]:+.4f}" if None not in loss[:2] else "",
            f"{loss[2] - loss[1]:+.4f}" if None not in loss[1:] else ""])
    if not rows:
        return []
    return [table(["step", "f32 held-out", "f16, attention in f32", "f16 (attention on tensor cores)",
                   "f16 with f32 attention - f32", "tensor-core attention - f32 attention"], rows)]


def host_profile(s):
    out = []
    for b in s.builds():
        rows = []
        for p in ("tiny", "small"):
            nat = step_rows(s, f"native_{p}", b)
            calls = [r for r in s.rows(f"dawn_calls_{p}", b) if r.get("runner") == "dawn" and "median_ms" in r]
            null = [r for r in s.rows(f"dawn_null_{p}", b) if r.get("runner") == "dawn" and "median_ms" in r]
            if nat or calls or null:
                rows.append([p, f(nat[0]["median_ms"]) if nat else "", f(nat[0]["median_record_ms"]) if nat else "",
                             f(calls[0]["median_record_ms"]) if calls else "", f(null[0]["median_ms"]) if null else "",
                             f(calls[0]["dispatches_step"], 0) if calls else ""])
        if rows:
            out.append("ms a step and the host's part of it (recording and submitting)" + (" (earlier build)" if b == "against" else "")
                       + ":\n\n" + table(["preset", "native step", "native recording", "Dawn recording (calls timed)",
                                          "Dawn null backend step", "dispatches"], rows))
        for p in ("tiny", "small"):
            methods = sorted((r for r in s.rows(f"dawn_calls_{p}", b) if r.get("bench") == "calls"), key=lambda r: -r["us_per_step"])
            if methods:
                out.append(f"WebGPU calls of a {p} step through Dawn, µs a step:\n\n" + table(
                    ["method", "µs a step", "calls a step", "µs a call"],
                    [[r["method"], f(r["us_per_step"], 1), f(r["calls_per_step"], 1), f(r["us_per_call"], 2)] for r in methods[:10]]))
    for r in s.rows("readback"):
        if "median_ms" in r:
            out.append(f"A readback's latency on the idle GPU through Dawn: median {r['median_ms']:.3f} ms over {r['round_trips']}.")
    return out


def parity(s):
    rows = []
    for l in s.lines:
        if "command" in l:
            results = [r["test_result"] for r in s.lines if r.get("run") == l["run"] and "test_result" in r]
            rows.append([l["run"], "passed" if l["exit"] == 0 else f"FAILED (exit {l['exit']})", "; ".join(results), l["seconds"]])
    return [table(["test binary", "result", "summary", "seconds"], rows, numbers=False)] if rows else []


def headline(s, info):
    machine, date = info.get("machine", "the GPU machine"), info.get("date", "")[:10]
    cmd = "`scripts/gpu-run.sh headline`"
    rows = []
    ours, twin = curve_points(s)
    at = max((k for k in ours if k in twin), default=None)
    if at:
        rows.append(["Learns as PyTorch does: held-out loss of the shakespeare preset",
                     f"{ours[at]['val_loss']:.3f} at step {at} (PyTorch twin {twin[at]['val_loss']:.3f})"])
    torch = {r["mode"]: r for r in torch_rows(s, r"torch_.*")}
    steps = {(r["preset"], r["variant"]): r for r in step_rows(s, r"step_.*", "this")}
    # the preset that stands for a real model: shakespeare on a GPU
    big = next((p for p, _ in steps if not p.endswith(" f16")), "shakespeare")
    base = torch.get("fp32")
    f32, f16 = steps.get((big, "pool + belt uploads")), steps.get((f"{big} f16", "pool + belt uploads"))
    shape = " (6 layers, 384 wide, batch 64 x 256)" if big == "shakespeare" else ""
    if base and f32:
        rows.append([f"A {big} training step{shape}, f32",
                     f"{f32['median_ms']:.1f} ms, {base['median_ms'] / f32['median_ms']:.2f}x PyTorch fp32 eager ({base['median_ms']:.1f} ms)"])
    if base and f16:
        tf32 = torch.get("tf32")
        beside = f" (PyTorch tf32: {tf32['median_ms']:.1f} ms, {tf32['median_ms'] / f16['median_ms']:.2f}x)" if tf32 else ""
        rows.append(["The same step with f16 GEMM operands (`--precision f16`, tensor cores)",
                     f"{f16['median_ms']:.1f} ms, {base['median_ms'] / f16['median_ms']:.2f}x PyTorch fp32 eager{beside}"])
    nopool = steps.get((big, "no pool"))
    if f32 and nopool:
        rows.append(["Buffers a steady step creates, with the pool / without",
                     f"{f32['buffers_created_per_step']:.0f} / {nopool['buffers_created_per_step']:.0f}: "
                     f"{nopool['median_ms'] / f32['median_ms']:.1f}x faster with it"])
    mem = [r for r in s.rows("memory") if r.get("final")]
    fused = torch.get("fp32_fused")
    if mem and fused:
        res = mem[0]["peak_bytes_reserved"]
        rows.append([f"GPU memory reserved at peak, {big} step",
                     f"{gb(res)} against PyTorch's {gb(fused['max_reserved'])} (fused attention): {1 - res / fused['max_reserved']:.0%} less"])
    gemm = gemm_vs_cublas(s)
    ratios = re.search(r"f32 against cuBLAS fp32 on (\d+) shapes: ([0-9.]+-[0-9.]+)", gemm[0]) if gemm else None
    if ratios:
        rows.append([f"The step's {ratios.group(1)} f32 GEMM shapes against cuBLAS fp32 on the same shapes", ratios.group(2)])
    native, dawn = native_calls(s, "native", "this"), dawn_calls(s, r"dawn_(tiny|small)", "this")
    parts = [f"{p} {med(native[(p, 2)]) / med(dawn[(p, 2)]):.2f}" for p in ("tiny", "small") if native.get((p, 2)) and dawn.get((p, 2))]
    if parts:
        rows.append(["The wasm build through Dawn (Chrome's WebGPU) against native, two calls in flight", ", ".join(parts)])
    pools = {r["bytes"]: r for r in s.rows("pool") if "pool_median_ns" in r}
    if pools:
        small, big = pools[min(pools)], pools[max(pools)]
        rows.append(["A buffer from the pool against create + destroy",
                     f"{small['pool_median_ns']:.0f} ns against {small['create_median_ns']:,.0f} ns; a dispatch on a fresh "
                     f"{human_bytes(big['bytes'])} buffer {big['dispatch_fresh_ns'] / big['dispatch_pooled_ns']:.0f}x slower"])
    return [table(["claim", "figure", "command", "machine", "date"], [r + [cmd, machine, date] for r in rows], numbers=False)] if rows else []


SECTIONS = {
    "parity": ("Parity on the GPU", parity),
    "step-vs-torch": ("The step against PyTorch", step_vs_torch),
    "gemm-vs-cublas": ("The GEMMs against cuBLAS", gemm_vs_cublas),
    # every variant's figures: sweep.md (scripts/gemm_sweep.py), after these tables
    "attention-vs-torch": ("Attention against PyTorch", attention_vs_torch),
    "gemm-sweep": ("The GEMM sweep: today's choices",
                   lambda s: gemm_vs_cublas(s) + gemm_ceiling(s) + step_vs_torch(s)),
    "kernel-stats": ("What the driver made of each kernel", kernel_stats),
    "browser-vs-native": ("The browser build against native", browser_vs_native),
    "memory": ("Memory against PyTorch", memory),
    "pool": ("Pool latency", pool),
    "curves": ("The learning curve against PyTorch", curves),
    "f16-curves": ("f16's learning curve against f32", f16_curves),
    "host-profile": ("Where a step's host time goes", host_profile),
    "soak": ("A long run through Dawn", soak),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--info")
    a = ap.parse_args()
    lines = load(a.results)
    info = info_fields(a.info)
    print(f"# {info.get('machine', 'results')}, {info.get('date', '')}\n")
    for name in dict.fromkeys(l["suite"] for l in lines if "suite" in l):
        s = Suite(name, lines)
        title, make = ("Headline", lambda s: headline(s, info)) if name == "headline" else SECTIONS[name]
        print(f"## {title} (`{name}`)\n")
        try:
            parts = make(s)
        except Exception as e:  # a table this script cannot make must not hide the others
            parts = [f"(no table: {type(e).__name__}: {e})"]
        for part in parts or ["(no results)"]:
            print(part + "\n")
        for bad in s.failures():
            print(f"- {bad}")
        print()


if __name__ == "__main__":
    sys.exit(main())
