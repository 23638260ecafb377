"""benchmarks/peers/common.py: what the two training-throughput peers share.

accelerate_fmnist.py (Hugging Face Accelerate) and ddp_fmnist.py (plain
PyTorch DistributedDataParallel, gloo) differ only in how they wrap the model,
the optimizer and the data loader and in how they call backward. Everything
else lives here, once, so the two measure the same thing:

* the command line (the flags of benchmarks/peers/run-peer.sh, see
  docs/benchmarks.md), checked with messages that name the bad value;
* the data: Fashion-MNIST from the HDF5 file that `acx data import-idx` writes
  (/train/images uint8 [60000 x 28 x 28], /train/labels uint8 [60000]), or
  synthetic uint8 "pixels" [n x IN] and labels in [0, OUT) from a fixed-seed
  generator (about half the pixels 0, as in benchmarks/train.c);
* the model of examples/fashion_mnist/mlp.c: Linear(in,h1) ReLU Linear(h1,h2)
  ReLU Linear(h2,out), mean softmax cross-entropy, with the pixels normalized
  inside the step exactly as mlp_load_input() does ((p/255 - 0.2860)/0.3530),
  and torch.optim.AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight_decay);
* the timing: batches are taken from the (wrapped) loader before the clock
  starts; W warm-up steps, a barrier, S timed steps; each rank's time is
  reduced with MAX so the slowest rank counts;
* the result: one JSON object written by rank 0 to the file named by
  --json-out (run-peer.sh prints it as the last line of its stdout).

What it leaves to the peers: process-group setup, the wrapping of the model,
optimizer and loader, and the backward call.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

# Fashion-MNIST training-set pixel statistics (pixels scaled to [0,1]); the
# same constants as FMNIST_MEAN / FMNIST_STD in examples/fashion_mnist/mlp.c.
FMNIST_MEAN = 0.2860
FMNIST_STD = 0.3530

FMNIST_DIMS = (784, 256, 128, 10)
SYNTHETIC_DIMS = (1024, 4096, 4096, 1024)

# Distinct synthetic batches generated per rank (the timed loop cycles over
# them); enough that the caches see fresh inputs, small enough to build fast.
SYNTHETIC_BATCHES = 100


class UsageError(Exception):
    """A bad flag value: reported in one line, exit status 1."""


def log(msg):
    """One human-readable line on stderr, flushed (ranks interleave)."""
    print(msg, file=sys.stderr, flush=True)


# ---- command line ----


def _positive(name):
    def conv(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError("--%s must be an integer, not '%s'" % (name, s))
        if v < 1:
            raise argparse.ArgumentTypeError("--%s must be >= 1, not %s" % (name, s))
        return v
    return conv


def _nonnegative_int(name):
    def conv(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError("--%s must be an integer, not '%s'" % (name, s))
        if v < 0:
            raise argparse.ArgumentTypeError("--%s must be >= 0, not %s" % (name, s))
        return v
    return conv


def _nonnegative_float(name):
    def conv(s):
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError("--%s must be a number, not '%s'" % (name, s))
        if not (v >= 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError("--%s must be a finite number >= 0, not %s" % (name, s))
        return v
    return conv


def _dims(s):
    parts = s.split(",")
    try:
        d = tuple(int(p) for p in parts)
    except ValueError:
        d = ()
    if len(d) != 4 or min(d) < 1:
        raise argparse.ArgumentTypeError("--dims must be four positive integers IN,H1,H2,OUT, not '%s'" % s)
    if d[3] > 256:
        raise argparse.ArgumentTypeError("--dims: OUT=%d classes do not fit the uint8 labels (at most 256)" % d[3])
    return d


def parse_args(prog, argv=None):
    """The peers' flags (those of run-peer.sh after --np, plus --json-out).

    Returns an argparse.Namespace with model, data, dims (a 4-tuple),
    batch_size, steps, warmup, threads, lr, weight_decay, seed, json_out.
    Exits with status 2 and argparse's message on a malformed flag.
    """
    p = argparse.ArgumentParser(
        prog=prog,
        description="Time the acx-fmnist MLP training step (forward, backward, gradient "
        "all-reduce, AdamW) on every rank; rank 0 writes one JSON object.")
    p.add_argument("--model", choices=("fmnist", "synthetic"), default="fmnist")
    p.add_argument("--data", help="Fashion-MNIST HDF5 from `acx data import-idx` (--model fmnist)")
    p.add_argument("--dims", type=_dims, help="IN,H1,H2,OUT (--model synthetic; default %s)"
                   % ",".join(map(str, SYNTHETIC_DIMS)))
    p.add_argument("--batch-size", type=_positive("batch-size"), default=64, help="samples per rank per step")
    p.add_argument("--steps", type=_positive("steps"), default=200, help="timed steps")
    p.add_argument("--warmup", type=_nonnegative_int("warmup"), default=10, help="untimed steps before")
    p.add_argument("--threads", type=_positive("threads"), default=1, help="compute threads per rank")
    p.add_argument("--lr", type=_nonnegative_float("lr"), default=1e-3)
    p.add_argument("--weight-decay", type=_nonnegative_float("weight-decay"), default=0.01)
    p.add_argument("--seed", type=int, default=42, help="initialization, shuffling and synthetic data")
    p.add_argument("--json-out", help="file rank 0 writes the JSON result to (default: stdout)")
    a = p.parse_args(argv)
    if a.model == "fmnist":
        if not a.data:
            p.error("--model fmnist needs --data FILE.h5 (create it with `acx data import-idx`)")
        if a.dims is not None and a.dims != FMNIST_DIMS:
            p.error("--dims %s does not match Fashion-MNIST (784,256,128,10); use --model synthetic"
                    % ",".join(map(str, a.dims)))
        a.dims = FMNIST_DIMS
    elif a.dims is None:
        a.dims = SYNTHETIC_DIMS
    return a


def set_threads(threads):
    """T compute threads in this process: torch's intra-op pool and, for any
    OpenMP code torch calls, OMP_NUM_THREADS (run-peer.sh also exports it
    before the launcher starts, which is when the OpenMP runtime reads it)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)


# ---- data ----


def load_fmnist(path):
    """Read the Fashion-MNIST training set from an `acx data import-idx` file.

    Returns (pixels, labels): torch.uint8 [60000 x 784] and torch.int64
    [60000]. Raises UsageError naming the file and dataset when the file is
    missing or a dataset has the wrong type or shape.
    """
    import h5py

    if not os.path.isfile(path):
        raise UsageError("%s: no such file (create it with `acx data import-idx "
                         "/usr/share/datasets/fashion-mnist -o %s`)" % (path, path))
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise UsageError("%s: not a readable HDF5 file (%s)" % (path, e))
    with f:
        for name in ("/train/images", "/train/labels"):
            if name not in f:
                raise UsageError("%s: no dataset %s (expected the layout `acx data import-idx` writes)"
                                 % (path, name))
        im, lb = f["/train/images"], f["/train/labels"]
        if im.dtype != np.uint8 or im.ndim != 3 or im.shape[1:] != (28, 28):
            raise UsageError("%s: /train/images must be uint8 [N x 28 x 28]; the file has %s %s"
                             % (path, im.dtype, list(im.shape)))
        if lb.dtype != np.uint8 or lb.shape != (im.shape[0],):
            raise UsageError("%s: /train/labels must be uint8 [%d]; the file has %s %s"
                             % (path, im.shape[0], lb.dtype, list(lb.shape)))
        pixels = np.asarray(im).reshape(im.shape[0], 784)
        labels = np.asarray(lb)
    if labels.max() > 9:
        raise UsageError("%s: /train/labels holds %d, outside the 10 classes 0..9" % (path, int(labels.max())))
    return torch.from_numpy(pixels), torch.from_numpy(labels.astype(np.int64))


def synthesize(n, dims, seed):
    """n synthetic samples, the same on every rank (the loader then gives each
    rank its own disjoint part): pixels torch.uint8 [n x IN], about half of
    them 0 and the rest uniform in 0..255, and labels torch.int64 [n] uniform
    in [0, OUT)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(n, dims[0]), dtype=np.uint8)
    pixels[rng.random(size=(n, dims[0])) < 0.5] = 0
    labels = rng.integers(0, dims[3], size=n, dtype=np.int64)
    return torch.from_numpy(pixels), torch.from_numpy(labels)


def make_dataset(args, world_size):
    """The training set as a torch TensorDataset of (uint8 pixels [IN],
    int64 label): all 60000 Fashion-MNIST samples, or SYNTHETIC_BATCHES
    batches for each of world_size ranks."""
    if args.model == "fmnist":
        pixels, labels = load_fmnist(args.data)
    else:
        pixels, labels = synthesize(SYNTHETIC_BATCHES * args.batch_size * world_size, args.dims, args.seed)
    return torch.utils.data.TensorDataset(pixels, labels)


def take_batches(loader, count):
    """Iterate a (possibly wrapped) DataLoader once, before any timing, and
    keep up to count batches as a list of (pixels, labels). The timed loop
    cycles over them when one epoch holds fewer than count batches. Raises
    UsageError when this rank got no full batch."""
    batches = []
    for pixels, labels in loader:
        batches.append((pixels, labels))
        if len(batches) == count:
            break
    if not batches:
        raise UsageError("no full batch for this rank: the data set is smaller than "
                         "--batch-size x ranks")
    return batches


# ---- model and step ----


def build_model(dims):
    """The MLP of examples/fashion_mnist/mlp.c in torch.nn.Linear layout
    (W [out x in]); torch's default initialization (the seed set by the
    caller), which does not change the speed."""
    i, h1, h2, o = dims
    return torch.nn.Sequential(
        torch.nn.Linear(i, h1), torch.nn.ReLU(),
        torch.nn.Linear(h1, h2), torch.nn.ReLU(),
        torch.nn.Linear(h2, o))


def build_optimizer(params, args):
    """AdamW with acx's hyperparameters (torch.optim.AdamW, default
    single-tensor implementation on CPU)."""
    return torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=args.weight_decay)


def normalize(pixels):
    """uint8 [B x IN] -> float32 [B x IN], as mlp_load_input():
    (p / 255 - mean) / std with Fashion-MNIST's statistics."""
    return (pixels.to(torch.float32) / 255.0 - FMNIST_MEAN) / FMNIST_STD


def train_step(model, optimizer, pixels, labels, backward):
    """One training step in the order Accelerate's and PyTorch's docs write
    it: zero_grad, forward, mean cross-entropy, backward (the peer's own:
    accelerator.backward or loss.backward; the gradient all-reduce runs in
    it), optimizer step. Returns the loss tensor (no .item(): no extra sync)."""
    optimizer.zero_grad()
    logits = model(normalize(pixels))
    loss = F.cross_entropy(logits, labels)
    backward(loss)
    optimizer.step()
    return loss


# ---- timing and result ----


def _barrier():
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _allreduce(value, op):
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.item()


def timed_run(step, batches, warmup, steps):
    """W untimed steps, a barrier, S timed steps; returns (seconds, loss,
    step_ms_median): the slowest rank's time for the S steps (MAX over
    ranks), the last step's loss averaged over ranks, and the median over
    steps of the slowest rank's time per step in ms (as acx-bench-train's
    step_ms: robust to the few steps another job preempts). step(pixels,
    labels) -> loss tensor. Collective over the default process group when
    there is one."""
    nb = len(batches)
    for i in range(warmup):
        step(*batches[i % nb])
    _barrier()
    per_step = [0.0] * steps
    t0 = time.perf_counter()
    t = t0
    loss = None
    for i in range(steps):
        loss = step(*batches[(warmup + i) % nb])
        now = time.perf_counter()
        per_step[i] = now - t
        t = now
    mine = t - t0
    slowest = _allreduce(mine, dist.ReduceOp.MAX)
    st = torch.tensor(per_step, dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(st, op=dist.ReduceOp.MAX)
    step_ms_median = 1e3 * statistics.median(st.tolist())
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    mean_loss = _allreduce(loss.item(), dist.ReduceOp.SUM) / world
    _barrier()
    return slowest, mean_loss, step_ms_median


def report(impl, args, world_size, rank, seconds, final_loss, step_ms_median=None):
    """Rank 0: one human line on stderr and the JSON result (the interface of
    run-peer.sh: samples_per_s counts all ranks, N*B*S/seconds; step_ms the
    mean step, step_ms_median the median of the slowest rank's steps) in
    args.json_out, or on stdout when none is given."""
    if rank != 0:
        return
    sps = world_size * args.batch_size * args.steps / seconds
    step_ms = 1e3 * seconds / args.steps
    log("%s: %d rank(s) x batch %d, %s %s, %d thread(s)/rank: %d steps in %.3f s, "
        "%.3f ms/step (median %.3f), %.0f samples/s, final loss %.4f"
        % (impl, world_size, args.batch_size, args.model, ",".join(map(str, args.dims)),
           args.threads, args.steps, seconds, step_ms,
           float("nan") if step_ms_median is None else step_ms_median, sps, final_loss))
    line = json.dumps({"impl": impl, "ranks": world_size, "model": args.model,
                       "batch_size": args.batch_size, "steps": args.steps,
                       "samples_per_s": round(sps, 3), "step_ms": round(step_ms, 6),
                       "step_ms_median": None if step_ms_median is None else round(step_ms_median, 6),
                       "final_loss": round(final_loss, 6)}, separators=(",", ":"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(line + "\n")
    else:
        print(line, flush=True)


def main_guard(prog, fn):
    """Run fn(); a UsageError becomes one line on stderr and exit status 1."""
    try:
        fn()
    except UsageError as e:
        log("%s: %s" % (prog, e))
        sys.exit(1)
