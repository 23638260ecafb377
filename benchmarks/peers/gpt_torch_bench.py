#!/usr/bin/env python3
"""benchmarks/peers/gpt_torch_bench.py - acx-gpt's training speed in PyTorch
under DDP or FSDP2 (gloo, CPU), for benchmarks/run-gpt.sh.

The model is gpt_reference.py's GPT (imported, not copied: one home for the
PyTorch model), float32, initialized as acx-gpt initializes (GPT-2: weights
N(0, 0.02), the two projections into the residual stream N(0, 0.02/sqrt(2L)),
biases 0, LayerNorm 1/0), trained on /train/tokens of an acx-gpt token file
(acx data import-text) with acx-gpt's step: B windows of T+1 tokens per
rank, mean cross-entropy, AdamW (betas 0.9/0.95, eps 1e-8, weight decay on
every parameter as acx-gpt phase 1), linear warm-up then cosine,
clip_grad_norm_ at --max-grad-norm. The windows are drawn from a seeded
generator (the speed does not depend on which windows).

  --impl ddp    torch.nn.parallel.DistributedDataParallel (gloo)
  --impl fsdp2  torch.distributed.fsdp.fully_shard on every block, then on
                the root (wte, wpe, ln_f: the tied head stays in the root)

Started by mpirun, one process per rank (torchrun does not work on this
host): RANK, WORLD_SIZE, LOCAL_RANK come from Open MPI's
OMPI_COMM_WORLD_RANK/SIZE, MASTER_ADDR 127.0.0.1, MASTER_PORT from the
environment (run-gpt.sh picks a free one). A single process without mpirun
runs world size 1. torch.set_num_threads(--threads) (default 1).

Timing: --warmup steps untimed, then --steps timed steps between two
barriers; rank 0 prints one line
  gpt_torch_bench impl=ddp ranks=N tokens_per_s=X step_ms=Y steps=S batch=B seq_len=T loss=L
(tokens_per_s: B*T*world*S over the timed wall time, all ranks together, as
acx-gpt counts).
"""
import argparse
import math
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import GPT, cosine_factor  # noqa: E402


def init_weights(model, layers):
    """GPT-2's initialization, as acx-gpt's (examples/gpt/gpt.c)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "ln_" in name:
                p.fill_(1.0)
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * layers))
            else:
                p.normal_(0.0, 0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=("ddp", "fsdp2"), required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    for k in ("layers", "d_model", "heads", "seq_len", "batch_size", "steps", "threads"):
        if getattr(a, k) < 1:
            sys.exit(f"gpt_torch_bench: --{k.replace('_', '-')} must be >= 1, not {getattr(a, k)}")
    if a.warmup < 0 or a.d_model % a.heads != 0:
        sys.exit("gpt_torch_bench: --warmup must be >= 0 and --heads must divide --d-model")
    torch.set_num_threads(a.threads)

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=world)

    T, B = a.seq_len, a.batch_size
    with h5py.File(a.data, "r") as f:
        if "/train/tokens" not in f:
            sys.exit(f"gpt_torch_bench: {a.data} has no /train/tokens (acx data import-text writes it)")
        tokens = torch.from_numpy(f["/train/tokens"][...].astype(np.int64))
    n_win = (tokens.numel() - 1) // T
    if n_win < B:
        sys.exit(f"gpt_torch_bench: {a.data}: {n_win} windows of {T + 1} tokens, need >= {B}")
    if int(tokens.max()) >= 256 or int(tokens.min()) < 0:
        sys.exit(f"gpt_torch_bench: {a.data}: token values outside 0..255")

    torch.manual_seed(a.seed)  # the same initial weights on every rank
    model = GPT(256, T, a.d_model, a.heads, a.layers)
    init_weights(model, a.layers)
    if a.impl == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
        wrapped = model
    opt = torch.optim.AdamW(wrapped.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=a.weight_decay)
    total = a.warmup + a.steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: cosine_factor(s, a.lr_warmup, total))
    gen = torch.Generator().manual_seed(a.seed * 7919 + rank)
    offs = torch.arange(T + 1)

    def step():
        w = torch.randint(0, n_win, (B,), generator=gen)
        rows = tokens[(w * T).unsqueeze(1) + offs]
        loss = wrapped(rows[:, :-1], rows[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), a.max_grad_norm)
        opt.step()
        sched.step()
        return loss

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    dist.barrier()
    dt = time.perf_counter() - t0
    lv = loss.detach().clone()
    dist.all_reduce(lv)
    if rank == 0:
        print(f"gpt_torch_bench impl={a.impl} ranks={world} tokens_per_s={B * T * world * a.steps / dt:.1f} "
              f"step_ms={1e3 * dt / a.steps:.3f} steps={a.steps} batch={B} seq_len={T} "
              f"loss={lv.item() / world:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
