#!/usr/bin/env python3
"""The side-by-side table of held-out losses from `scripts/gpu-run.sh curves`:

    python3 scripts/torch_curves.py TIDEPOOL.jsonl TORCH.jsonl

TIDEPOOL.jsonl is `tidepool train --json --eval-every N` (a line a step; `val_loss` is
the latest evaluation, so it is read at the steps where one happened), TORCH.jsonl is
scripts/torch_twin.py's output (a line an evaluation). Prints a Markdown table, the
largest gap up to step 2000 and each side's best held-out loss.
"""
import json
import sys


def lines(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    pass  # a line cut off by a timeout


def main(tidepool_path, torch_path):
    twin = {r["step"]: r for r in lines(torch_path) if "val_loss" in r and not r.get("final")}
    ours = {}
    for r in lines(tidepool_path):
        if not r.get("final") and r.get("step") in twin and r.get("val_loss") is not None:
            ours[r["step"]] = r
    print("| step | tidepool train loss | tidepool held-out | PyTorch train loss | PyTorch held-out | difference |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    gap = (0.0, None)
    for step in sorted(twin):
        t = twin[step]
        o = ours.get(step)
        if o is None:
            print(f"| {step} | | | {t['train_loss']:.3f} | {t['val_loss']:.3f} | |")
            continue
        d = o["val_loss"] - t["val_loss"]
        if step <= 2000 and abs(d) >= abs(gap[0]):
            gap = (d, step)
        print(f"| {step} | {o['loss']:.3f} | {o['val_loss']:.3f} | {t['train_loss']:.3f} | {t['val_loss']:.3f} | {d:+.3f} |")
    best = lambda rows: min((r["val_loss"], s) for s, r in rows.items()) if rows else (float("nan"), None)
    print()
    print(f"largest held-out difference up to step 2000: {gap[0]:+.3f} at step {gap[1]}")
    print("best held-out: tidepool {:.3f} (step {}), PyTorch {:.3f} (step {})".format(*best(ours), *best(twin)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
