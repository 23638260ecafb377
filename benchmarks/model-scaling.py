#!/usr/bin/env python3
"""benchmarks/model-scaling.py - step time and memory per sharding strategy.

The written model of docs/multi-node.md as a program: for a model of P
parameters trained data-parallel on N ranks (G per node), the time of one
optimizer step and the bytes of model state per rank under NO_SHARD (DDP),
SHARD_GRAD_OP (ZeRO-2), FULL_SHARD (ZeRO-3) and HYBRID_SHARD, from the link
bandwidths and latencies, the compute time of a step and the communication
volumes of each strategy. Plain python3, no dependencies.

  benchmarks/model-scaling.py                      # the 8 .. 1024 GPU table
  benchmarks/model-scaling.py --inter-bw 12.5      # slower inter-node links
  benchmarks/model-scaling.py --testbed --params 6.8M --mixed-precision no \\
      --reduce-dtype fp32 --units 3 --inter-bw 0.118 --intra-bw 1.3 \\
      --compute-ms 700 --optimizer-ms 200      # 2 nodes x 2 ranks, as run-nodes.sh

Units: bandwidths in GB/s (10^9 bytes per second) in ONE direction: --intra-bw
per rank (what one rank moves to its node neighbours: NVLink, or shared
memory), --inter-bw per node (all of a node's NICs together: the node's ranks
share it); latencies in microseconds; times in milliseconds; memory in GiB.

What is left out (docs/multi-node.md says why each is small or not): the
activations, the data loader, kernels' launch cost, congestion above the
node's link (a full-bisection fabric is assumed), and for --overlap full the
last bucket's / unit's collective that has nothing left to hide behind.
"""
import argparse
import math
import sys

STRATEGIES = ("NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD")


def number(text):
    """12, 1.5e9, 7B, 350M, 64K (powers of 10: parameter counts)."""
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
    t = text.strip().upper()
    try:
        if t and t[-1] in mult:
            v = float(t[:-1]) * mult[t[-1]]
        else:
            v = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number (e.g. 7B, 350M, 1.5e9)")
    if not v > 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"'{text}' must be a positive number")
    return v


def positive(text):
    v = number(text)
    return v


def nonneg(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number")
    if not v >= 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"'{text}' must be >= 0")
    return v


# ---- communication -------------------------------------------------------

class Links:
    """alpha-beta costs: bandwidths in bytes/s, latencies in s."""

    def __init__(self, intra_bw, intra_lat, inter_bw, inter_lat, latency_form):
        self.bi, self.ai = intra_bw, intra_lat
        self.be, self.ae = inter_bw, inter_lat
        self.form = latency_form


def coll_time(links, kind, size, n, per_node, share=1, calls=1):
    """Seconds of `calls` collectives of `kind` moving `size` bytes in all
    (the all-reduce's buffer, the all-gather's output, the reduce-scatter's
    input) over n ranks, per_node of them on each node (n / per_node nodes),
    with `share` such collectives crossing each node's link at once.

    Bandwidth: a ring through the n ranks, node after node. Every rank sends
    f * size bytes, f = 2(n-1)/n (all-reduce) or (n-1)/n (all-gather,
    reduce-scatter), in steps of size/n; in each step one rank per node sends
    across the node boundary, so the node's link carries f * size too (times
    `share`). Ring steps are pipelined, so the slower of the two link
    classes sets the pace. Latency: each of the ring's 2(n-1) or (n-1)
    steps waits for the slowest hop; with --latency tree an all-reduce
    takes 2 log2(n) hops (NCCL's double binary tree; all-gather and
    reduce-scatter are rings in NCCL too); --latency auto (the default)
    takes the smaller, as NCCL's tuner picks the faster algorithm.
    """
    if n <= 1 or size <= 0:
        return 0.0
    steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
    f = steps / n
    nodes = n // per_node
    per_rank = f * size
    t_bw = per_rank / links.bi
    alpha = links.ai
    if nodes > 1:
        t_bw = max(t_bw, share * per_rank / links.be)
        alpha = links.ae
    if kind == "all-reduce" and links.form != "ring":
        tree = 2 * math.ceil(math.log2(n))
        if links.form == "tree" or tree < steps:
            steps = tree
    return t_bw + calls * steps * alpha


def step_time(a, strategy, n, g, links):
    """(total, comm, inter-node bytes per node) of one step, seconds/bytes."""
    P = a.params
    pg = P * a.param_bytes  # what an all-gather moves (param dtype)
    rg = P * a.reduce_bytes  # what a reduction moves (reduce dtype)
    units = a.units
    buckets = max(1, math.ceil(rg / (a.bucket_mb * 1024 * 1024)))
    tc, topt = a.compute_ms / 1e3, a.optimizer_ms / 1e3
    tf, tb = tc / 3, 2 * tc / 3  # forward : backward = 1 : 2
    g = min(g, n)
    nodes = n // g
    if strategy == "HYBRID_SHARD" and nodes == 1:
        strategy = "FULL_SHARD"  # one node: the same thing
    if strategy == "NO_SHARD":
        ar = coll_time(links, "all-reduce", rg, n, g, calls=buckets)
        comm = ar
        wire = 2 * (n - 1) / n * rg if nodes > 1 else 0
        seq = tc + ar + topt
        ovl = tf + max(tb, ar) + topt
    elif strategy == "SHARD_GRAD_OP":
        rs = coll_time(links, "reduce-scatter", rg, n, g, calls=units)
        ag = coll_time(links, "all-gather", pg, n, g, calls=units)
        comm = rs + ag
        wire = (n - 1) / n * (rg + pg) if nodes > 1 else 0
        seq = tc + rs + ag + topt / n
        ovl = tf + max(tb, rs) + ag + topt / n  # acx gathers after the step
    elif strategy == "FULL_SHARD":
        ag = coll_time(links, "all-gather", pg, n, g, calls=units)
        rs = coll_time(links, "reduce-scatter", rg, n, g, calls=units)
        comm = 2 * ag + rs
        wire = (n - 1) / n * (2 * pg + rg) if nodes > 1 else 0
        seq = tc + comm + topt / n
        ovl = max(tf, ag) + max(tb, ag + rs) + topt / n
    else:  # HYBRID_SHARD: FULL_SHARD in the node, all-reduce of a 1/g shard across
        ag = coll_time(links, "all-gather", pg, g, g, calls=units)
        rs = coll_time(links, "reduce-scatter", rg, g, g, calls=units)
        ar = coll_time(links, "all-reduce", rg / g, nodes, 1, share=g, calls=units)
        comm = 2 * ag + rs + ar
        wire = 2 * (nodes - 1) / nodes * rg
        seq = tc + comm + topt / g
        # acx's cross-node all-reduce is blocking, right after the unit's
        # reduce-scatter: in backward, serial with it
        ovl = max(tf, ag) + max(tb, ag + rs + ar) + topt / g
    return (ovl if a.overlap == "full" else seq), comm, wire


# ---- memory (sharding/memory_estimate.c, docs/memory.md) -----------------

def memory(a, strategy, n, g):
    """Bytes per rank: acx_memory_estimate's formulas (host layout: float32
    compute copies and gradient buffers; AdamW, 2 states)."""
    P = int(a.params)
    U = max(1, math.ceil(P / a.units))  # the largest unit: equal units
    K = 2
    pb = a.param_bytes
    rb = a.reduce_bytes
    S = min(g, n) if strategy == "HYBRID_SHARD" else n
    Sh = -(-P // S)
    piece = -(-U // S)
    Up = S * piece
    unit = 4 * U
    rs = rb * Up
    ag = pb * Up + (pb * piece if pb == 2 else 0)
    if strategy == "NO_SHARD":
        params = 4 * P
        grads = params + (2 * P if rb == 2 else 0)
        master = 0 if pb == 4 else 4 * P
        opt = 4 * K * P
        trans = 0
    elif strategy == "SHARD_GRAD_OP":
        params, grads, master, opt = 4 * P, unit + 4 * Sh, 4 * Sh, 4 * K * Sh
        trans = max(rs, 2 * ag)
    else:
        params, grads, master, opt = 0, unit + 4 * Sh, 4 * Sh, 4 * K * Sh
        # the unit in use, the next one's all-gather in flight, one
        # reduce-scatter in flight (acx prefetches one position ahead)
        trans = unit + ag + rs
    return params + grads + master + opt + trans


# ---- output --------------------------------------------------------------

def human_params(p):
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if p >= div:
            return f"{p / div:g}{suf}"
    return f"{p:g}"


def print_settings(a):
    print(f"# model: P = {human_params(a.params)} parameters; all-gather {a.param_bytes} B/element, "
          f"reduction {a.reduce_bytes} B/element; {a.units} units; buckets of {a.bucket_mb:g} MiB")
    print(f"# links: intra-node {a.intra_bw:g} GB/s per rank, {a.intra_lat:g} us; inter-node "
          f"{a.inter_bw:g} GB/s per node, {a.inter_lat:g} us; latency form {a.latency}")
    print(f"# compute {a.compute_ms:g} ms per step (forward:backward 1:2), optimizer "
          f"{a.optimizer_ms:g} ms over all P on one rank; overlap {a.overlap}")
    if a.gpu_mem_gib > 0:
        print(f"# memory: acx_memory_estimate's formulas, AdamW; '*' = more than "
              f"{a.gpu_mem_gib:g} GiB per rank")


def table(a, sizes):
    links = Links(a.intra_bw * 1e9, a.intra_lat * 1e-6, a.inter_bw * 1e9, a.inter_lat * 1e-6,
                  a.latency)
    print_settings(a)
    head = (f"{'ranks':>6} {'nodes':>5} " + " ".join(f"{s.lower() + ' ms':>18}" for s in STRATEGIES)
            + f" {'hybrid/full':>11} " + " ".join(f"{s.lower() + ' GiB':>19}" for s in STRATEGIES))
    print(head)
    for n in sizes:
        g = min(a.gpus_per_node, n)
        row, mem = [], []
        for s in STRATEGIES:
            t, _, _ = step_time(a, s, n, g, links)
            row.append(t)
            m = memory(a, s, n, g) / 2**30
            flag = "*" if a.gpu_mem_gib > 0 and m > a.gpu_mem_gib else " "
            mem.append(f"{m:18.2f}{flag}")
        ratio = row[3] / row[2] if row[2] > 0 else float("nan")
        print(f"{n:>6} {n // g:>5} " + " ".join(f"{t * 1e3:>18.1f}" for t in row)
              + f" {ratio:>11.3f} " + " ".join(mem))


def testbed(a):
    """The 2 nodes x 2 ranks of benchmarks/run-nodes.sh: predicted step time
    per strategy, its communication part and what crosses each node's link."""
    links = Links(a.intra_bw * 1e9, a.intra_lat * 1e-6, a.inter_bw * 1e9, a.inter_lat * 1e-6,
                  a.latency)
    print_settings(a)
    n, g = a.testbed_ranks, a.gpus_per_node
    print(f"# test bed: {n // g} nodes x {g} ranks")
    print(f"{'strategy':<14} {'step ms':>10} {'comm ms':>10} {'MB/node link':>13}")
    res = {}
    for s in ("NO_SHARD", "FULL_SHARD", "HYBRID_SHARD"):
        t, c, w = step_time(a, s, n, g, links)
        res[s] = t
        print(f"{s:<14} {t * 1e3:>10.1f} {c * 1e3:>10.1f} {w / 1e6:>13.1f}")
    print(f"hybrid/full {res['HYBRID_SHARD'] / res['FULL_SHARD']:.3f}")


def main(argv):
    ap = argparse.ArgumentParser(
        description="Step time and memory per rank of acx's sharding strategies "
        "(docs/multi-node.md).")
    ap.add_argument("--params", type=number, default=7e9, help="parameters (default 7B)")
    ap.add_argument("--mixed-precision", choices=("no", "bf16", "fp16"), default="bf16",
                    help="bf16 or fp16: all-gathers move 2 B/element (default bf16); no: 4")
    ap.add_argument("--reduce-dtype", choices=("fp32", "bf16", "fp16"), default="bf16",
                    help="bytes per element of the gradient reductions (default bf16)")
    ap.add_argument("--units", type=int, default=32,
                    help="FSDP units (layers), equal sizes (default 32)")
    ap.add_argument("--bucket-mb", type=positive, default=25.0, help="DDP bucket (default 25)")
    ap.add_argument("--gpus-per-node", type=int, default=8, help="G (default 8)")
    ap.add_argument("--intra-bw", type=positive, default=150.0,
                    help="GB/s per rank inside a node (default 150: NVLink)")
    ap.add_argument("--intra-lat", type=nonneg, default=5.0, help="us (default 5)")
    ap.add_argument("--inter-bw", type=positive, default=50.0,
                    help="GB/s per node between nodes (default 50: one 400 Gb/s NIC)")
    ap.add_argument("--inter-lat", type=nonneg, default=10.0, help="us (default 10)")
    ap.add_argument("--latency", choices=("auto", "ring", "tree"), default="auto",
                    help="all-reduce latency term: ring (2(n-1) hops), tree (2 log2 n), "
                    "auto: the smaller (default)")
    ap.add_argument("--compute-ms", type=nonneg, default=None,
                    help="forward + backward of one rank's micro-batch (default: "
                    "6 P tokens / flops)")
    ap.add_argument("--tokens-per-rank", type=positive, default=16384,
                    help="tokens per rank per step for the default compute time (16384)")
    ap.add_argument("--tflops", type=positive, default=400.0,
                    help="achieved TFLOP/s per rank for the default compute time (400)")
    ap.add_argument("--optimizer-ms", type=nonneg, default=0.0,
                    help="the optimizer over all P on one rank (default 0)")
    ap.add_argument("--overlap", choices=("none", "full"), default="full",
                    help="full: collectives hide behind compute where acx overlaps them "
                    "(default); none: every collective adds to the step")
    ap.add_argument("--gpu-mem-gib", type=nonneg, default=80.0,
                    help="mark memory above this per rank (default 80; 0: no mark)")
    ap.add_argument("--ranks", default="8,16,32,64,128,256,512,1024",
                    help="world sizes of the table (default 8..1024)")
    ap.add_argument("--testbed", action="store_true",
                    help="predict the test bed's 2 nodes x 2 ranks (G = 2, overlap none "
                    "unless given)")
    ap.add_argument("--testbed-ranks", type=int, default=4, help=argparse.SUPPRESS)
    ap.add_argument("--memory-bytes", action="store_true",
                    help="print only 'RANKS STRATEGY BYTES' per world size and strategy "
                    "(what tests/model_scaling.test compares with acx estimate-memory)")
    a = ap.parse_args(argv)

    a.param_bytes = 4 if a.mixed_precision == "no" else 2
    a.reduce_bytes = 4 if a.reduce_dtype == "fp32" else 2
    if a.units < 1 or a.gpus_per_node < 1:
        ap.error("--units and --gpus-per-node must be >= 1")
    if a.compute_ms is None:
        a.compute_ms = 6 * a.params * a.tokens_per_rank / (a.tflops * 1e12) * 1e3
    if a.testbed:
        if "--gpus-per-node" not in " ".join(argv):
            a.gpus_per_node = 2
        if "--overlap" not in " ".join(argv):
            a.overlap = "none"
        if a.testbed_ranks % a.gpus_per_node:
            ap.error("--gpus-per-node must divide the test bed's 4 ranks")
        testbed(a)
        return 0
    try:
        sizes = [int(x) for x in a.ranks.split(",")]
    except ValueError:
        ap.error(f"--ranks '{a.ranks}': expected a comma-separated list of integers")
    for n in sizes:
        if n < 1 or (n > a.gpus_per_node and n % a.gpus_per_node):
            ap.error(f"--ranks: {n} is not a multiple of --gpus-per-node {a.gpus_per_node}")
    if a.memory_bytes:
        for n in sizes:
            for st in STRATEGIES:
                print(n, st, memory(a, st, n, min(a.gpus_per_node, n)))
        return 0
    table(a, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
