#!/usr/bin/env python3
"""benchmarks/peers/gpt_reference.py - acx-gpt's training in PyTorch, for
comparing losses step by step.

The same architecture as examples/gpt/gpt_model.c (GPT-2: token and position
embeddings, pre-LayerNorm blocks of causal multi-head attention and a
tanh-GELU MLP, final LayerNorm, output layer tied to the token embedding),
float32, with:
  - the initial values acx-gpt wrote with --save-init (acx_model_save_weights:
    one tensor per parameter, named like the parameters here), a safetensors
    file (read here with numpy and json: torch 1.13 has no safetensors
    module) or an acx weights file (HDF5, h5py);
  - the same batches: acx-gpt --dump-batches PREFIX writes PREFIX.rR per rank,
    one line "step micro window..." per micro-step (the windows are the
    batch->indices of acx's token loader, whose window w of the token array
    is tokens[w*T : w*T+T+1], as here). One process here computes what the
    data-parallel ranks compute together: the ranks' windows of a
    micro-step in rank order form one batch whose mean token loss is the
    mean of the ranks' means (equal sizes), and the gradient of the step is
    the mean over its micro-steps, as acx averages;
  - torch.optim.AdamW (betas 0.9/0.95, eps 1e-8) with weight decay on the
    2-D weights only (GPT's recipe, acx-gpt's no_decay group; --decay-1d 1
    decays every parameter), the cosine schedule with
    linear warmup of transformers' get_cosine_schedule_with_warmup (LambdaLR),
    torch.nn.utils.clip_grad_norm_.
  - --bf16: acx's mixed_precision bf16 on the CPU: the forward and backward
    read parameter copies rounded to bfloat16 (computing in float32); the
    optimizer updates the float32 master weights with those gradients.
Prints "step N loss X" per optimizer step (X: the step's mean training loss).

  python3 gpt_reference.py --data tok.h5 --weights init.h5 --batches b \
      --world 2 --steps 50 [model and optimizer flags as acx-gpt's]
"""
import argparse
import glob
import json
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C)
        self.attn.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, 4 * C)
        self.mlp.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn.c_proj(y)
        h = F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp.c_proj(h)


class GPT(nn.Module):
    def __init__(self, V, T, C, NH, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # the tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def read_safetensors(path):
    """{name: float32 numpy array} of a safetensors file: an 8-byte
    little-endian header length, the JSON header {name: {dtype, shape,
    data_offsets [begin, end)} relative to the end of the header}, then
    the data. Checked before use: offsets inside the file, sizes matching
    the shapes."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"gpt_reference: {path}: {len(blob)} bytes, too short for safetensors")
    n = int.from_bytes(blob[:8], "little")
    if n > len(blob) - 8:
        sys.exit(f"gpt_reference: {path}: header length {n} beyond the file ({len(blob)} bytes)")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = t.get("dtype")
        if dt not in SAFETENSORS_DTYPES and dt != "BF16":
            sys.exit(f"gpt_reference: {path}: {name}: dtype {dt} (expected F32, F16, F64, BF16)")
        begin, end = t["data_offsets"]
        shape = tuple(t["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        size = 2 if dt in ("F16", "BF16") else 8 if dt == "F64" else 4
        if not 0 <= begin <= end <= len(data) or end - begin != count * size:
            sys.exit(f"gpt_reference: {path}: {name}: data_offsets [{begin}, {end}) do not hold "
                     f"{dt} {list(shape)} within {len(data)} data bytes")
        raw = data[begin:end]
        if dt == "BF16":  # the high half of a float32
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, SAFETENSORS_DTYPES[dt]).astype(np.float32)
        out[name] = a.reshape(shape)
    return out


def read_weights(path):
    """{name: float32 array}: safetensors or an acx weights file (HDF5), by content."""
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic == b"\x89HDF\r\n\x1a\n":
        with h5py.File(path, "r") as f:
            return {k: f[k][...] for k in f.keys() if isinstance(f[k], h5py.Dataset)}
    return read_safetensors(path)


def cosine_factor(s, warmup, total):
    if s < warmup:
        return s / max(1, warmup)
    p = (s - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 2.0 * 0.5 * p)))


def read_batches(prefix, world):
    """{step: [[windows of rank 0, rank 1, ...] per micro-step in order]}"""
    files = sorted(glob.glob(prefix + ".r*"))
    if len(files) != world:
        sys.exit(f"gpt_reference: {prefix}.r*: {len(files)} files, expected {world}")
    steps = {}
    for r in range(world):
        with open(f"{prefix}.r{r}") as f:
            for line in f:
                v = [int(x) for x in line.split()]
                step, micro, wins = v[0], v[1], v[2:]
                steps.setdefault(step, {}).setdefault(micro, [None] * world)[r] = wins
    return {s: [m[k] for k in sorted(m)] for s, m in steps.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batches", required=True)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--decay-1d", type=int, default=0,
                    help="0: weight decay on 2-D weights only (two param groups, as "
                    "acx-gpt); 1: on every parameter")
    ap.add_argument("--seed", type=int, default=None,
                    help="ignored (acx-gpt's flag): the weights and batches come from acx-gpt")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    T = a.seq_len
    with h5py.File(a.data, "r") as f:
        tokens = torch.from_numpy(f["/train/tokens"][...].astype(np.int64))
    master = GPT(256, T, a.d_model, a.heads, a.layers)
    compute = GPT(256, T, a.d_model, a.heads, a.layers)
    weights = read_weights(a.weights)
    with torch.no_grad():
        for name, p in master.named_parameters():
            if name not in weights:
                sys.exit(f"gpt_reference: {a.weights} has no tensor {name}")
            w = torch.from_numpy(np.array(weights[name], dtype=np.float32))
            if w.shape != p.shape:
                sys.exit(f"gpt_reference: {name}: shape {tuple(w.shape)}, expected {tuple(p.shape)}")
            p.copy_(w)
    params = list(master.parameters())
    if a.decay_1d:
        groups = [{"params": params, "weight_decay": a.weight_decay}]
    else:
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: cosine_factor(s, a.warmup, a.steps))
    batches = read_batches(a.batches, a.world)
    for step in range(a.steps):
        if step not in batches:
            sys.exit(f"gpt_reference: no batches for step {step} in {a.batches}.r*")
        with torch.no_grad():  # the compute copies (bf16: rounded) of the master weights
            for pc, pm in zip(compute.parameters(), master.parameters()):
                pc.copy_(pm.to(torch.bfloat16).float() if a.bf16 else pm)
        compute.zero_grad(set_to_none=True)
        micro = batches[step]
        total = 0.0
        for ranks in micro:
            wins = torch.tensor([w for r in ranks for w in r], dtype=torch.int64)
            rows = torch.stack([tokens[w * T: w * T + T + 1] for w in wins.tolist()])
            loss = compute(rows[:, :-1], rows[:, 1:])
            (loss / len(micro)).backward()
            total += loss.item()
        for pc, pm in zip(compute.parameters(), master.parameters()):
            pm.grad = pc.grad.clone()
        if a.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
        opt.step()
        sched.step()
        print(f"step {step + 1} loss {total / len(micro):.9g}", flush=True)


if __name__ == "__main__":
    main()
