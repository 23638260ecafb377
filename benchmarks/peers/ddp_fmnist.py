"""benchmarks/peers/ddp_fmnist.py: the acx-fmnist MLP step in plain PyTorch
DistributedDataParallel on CPU with the gloo backend, the peer a user who
skips every wrapper library would write.

Launched with torchrun, as PyTorch's DDP documentation shows (one node):

    OMP_NUM_THREADS=T torchrun --standalone --nproc-per-node N \
        benchmarks/peers/ddp_fmnist.py --model fmnist --data fmnist.h5 ...

benchmarks/peers/run-peer.sh does this for acx-bench-train. torchrun sets
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, so init_process_group("gloo") reads
them from the environment. Data set, model, step, timing and the JSON result
are common.py's; what is this file's own: the process group, the DDP wrapper
(default 25 MB buckets: the whole model is one bucket), DistributedSampler
for each rank's disjoint samples, and loss.backward().
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROG = "ddp_fmnist.py"


def main():
    args = common.parse_args(PROG)
    common.set_threads(args.threads)
    if "RANK" not in os.environ:
        raise common.UsageError("launch with torchrun (RANK/WORLD_SIZE are not set), e.g. "
                                "torchrun --standalone --nproc-per-node N %s ..." % PROG)
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    dataset = common.make_dataset(args, world)
    torch.manual_seed(args.seed)  # same initial model on every rank (DDP also broadcasts rank 0's)
    model = DDP(common.build_model(args.dims))
    optimizer = common.build_optimizer(model.parameters(), args)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    batches = common.take_batches(loader, args.warmup + args.steps)

    def step(pixels, labels):
        return common.train_step(model, optimizer, pixels, labels, lambda loss: loss.backward())

    seconds, loss = common.timed_run(step, batches, args.warmup, args.steps)
    common.report("ddp", args, world, rank, seconds, loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    common.main_guard(PROG, main)
