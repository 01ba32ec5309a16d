"""Record PyTorch memory snapshots of real training, for `tidepool trace replay`.

Each model trains a few warm-up steps (so the caching allocator and the optimizer
state are in their steady state), then PyTorch records every allocation over
`--steps` more with `torch.cuda.memory._record_memory_history()`, and
`_dump_snapshot()` writes the pickle. Beside each `<name>.pickle` a `<name>.json`
holds what PyTorch itself reports for the recorded steps: `max_memory_allocated`
and `max_memory_reserved` (peak statistics reset when recording starts), the figures
the replay's lower bound and the snapshot's reserved bytes are checked against.

    python3 scripts/torch_snapshot.py OUT_DIR [MODEL ...]

Models: gpt_eager, gpt_sdpa (the shakespeare GPT of scripts/torch_gpt.py, manual
and fused attention), resnet18 (torchvision, random weights), gpt2 (Hugging Face
transformers, a 6-layer GPT-2 of random weights). A model whose package is missing
is skipped with a line saying so.
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = int(os.environ.get("SNAPSHOT_STEPS", "3"))
WARMUP = 2


def shakespeare_gpt(sdpa):
    V, T, C, L, H, B = 65, 256, 384, 6, 6, 64

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            s.fc, s.fcp = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            s.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

        def forward(s, x):
            b, t, c = x.shape
            q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
            q, k, v = [z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v)]
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                a = (q @ k.transpose(-2, -1)) / math.sqrt(c // H)
                a = a.masked_fill(s.mask[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
                y = a @ v
            x = x + s.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + s.fcp(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            s.blocks = nn.ModuleList([Block() for _ in range(L)])
            s.lnf = nn.LayerNorm(C)

        def forward(s, idx, tgt):
            x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in s.blocks:
                x = blk(x)
            logits = s.lnf(x) @ s.wte.weight.t()
            return F.cross_entropy(logits.view(-1, V), tgt.view(-1))

    m = GPT().cuda()
    idx = torch.randint(0, V, (B, T), device="cuda")
    tgt = torch.randint(0, V, (B, T), device="cuda")
    return m, lambda: m(idx, tgt)


def resnet18():
    import torchvision

    m = torchvision.models.resnet18(weights=None).cuda()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    return m, lambda: F.cross_entropy(m(x), y)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=6, n_embd=384, n_head=6, n_positions=256, vocab_size=50257)
    m = GPT2LMHeadModel(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    return m, lambda: m(input_ids=ids, labels=ids).loss


MODELS = {
    "gpt_eager": lambda: shakespeare_gpt(False),
    "gpt_sdpa": lambda: shakespeare_gpt(True),
    "resnet18": resnet18,
    "gpt2": gpt2,
}


def record(name, out_dir):
    torch.manual_seed(0)
    torch.cuda.empty_cache()
    try:
        model, loss_fn = MODELS[name]()
    except ImportError as e:
        print(json.dumps({"model": name, "skipped": str(e)}), flush=True)
        return
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step():
        loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start_allocated = torch.cuda.memory_allocated()
    start_reserved = torch.cuda.memory_reserved()
    # Python frames only (C++ frames would make the file ten times larger).
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    t0 = time.perf_counter()
    for _ in range(STEPS):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    path = os.path.join(out_dir, f"{name}.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    figures = {
        "model": name,
        "steps": STEPS,
        "warmup_steps": WARMUP,
        "loss": round(loss.item(), 4),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "memory_allocated_at_start": start_allocated,
        "memory_reserved_at_start": start_reserved,
        "memory_allocated_at_end": torch.cuda.memory_allocated(),
        "memory_reserved_at_end": torch.cuda.memory_reserved(),
        "ms_per_step_recording": round(seconds / STEPS * 1e3, 2),
        "bytes": os.path.getsize(path),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(figures, f, indent=1)
    print(json.dumps(figures), flush=True)
    del model, opt


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or list(MODELS):
        try:
            record(name, out)
        except Exception as e:  # one model's failure leaves the others' files
            print(json.dumps({"model": name, "error": str(e)[:300]}), flush=True)
