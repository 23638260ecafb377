"""benchmarks/peers/accelerate_fmnist.py: the acx-fmnist MLP step through
Hugging Face Accelerate on CPU, written as Accelerate's quick tour writes a
training script: Accelerator(), accelerator.prepare(model, optimizer,
dataloader), accelerator.backward(loss).

How it is launched (benchmarks/peers/run-peer.sh does it): Accelerate's
multi-CPU mode on one node, as its "Training on Intel CPU" guide shows it,
with a config file of distributed_type MULTI_CPU, use_cpu true,
num_processes N (the file `accelerate config` writes for "multi-CPU"):

    mpirun -n N accelerate launch --config_file CFG \
        --num_cpu_threads_per_process T \
        benchmarks/peers/accelerate_fmnist.py --model fmnist --data fmnist.h5 ...

Why this form. For a CPU run `accelerate launch` never uses torchrun (its
multi-GPU launcher is skipped when the CPU is asked for); it runs the script
in one process and relies on MPI's launcher for the others. The guide shows
two ways: accelerate starting mpirun itself (mpirun_config / --mpirun_hostfile)
or the user's `mpirun -n N accelerate launch script.py`. The first passes
Open MPI `--bind-to socket` without "overload-allowed", which Open MPI
refuses as soon as there are more ranks than cores ("binding more processes
than cpus", measured on this 2-core machine at N = 4); so run-peer.sh uses
the second, binding to the socket as accelerate's own call does, overload
allowed. Either way the training processes are the same: each sees
OMPI_COMM_WORLD_SIZE = N with ACCELERATE_USE_CPU set, Accelerator() picks
DistributedType.MULTI_CPU and, since PyPI's torch has no MPI backend,
initializes the process group with gloo, the transport of the plain-DDP
peer; the launcher per rank only waits. With N = 1 (distributed_type NO) it
is `accelerate launch` alone: one process, no DDP wrapper, exactly what an
Accelerate user gets on one process.

Data set, model, step, timing and the JSON result are common.py's; this
file's own part is the Accelerator and what prepare() wraps: the model in
DistributedDataParallel, the optimizer in AcceleratedOptimizer, and the
DataLoader in Accelerate's sharded loader (each rank its own batches).
"""

import os
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROG = "accelerate_fmnist.py"


def main():
    args = common.parse_args(PROG)
    common.set_threads(args.threads)
    accelerator = Accelerator()
    if accelerator.device.type != "cpu":
        raise common.UsageError("Accelerate chose device %s; launch with `accelerate launch --cpu`"
                                % accelerator.device)
    common.set_threads(args.threads)  # Accelerate may have changed it (it does when OMP_NUM_THREADS is unset)
    world, rank = accelerator.num_processes, accelerator.process_index

    dataset = common.make_dataset(args, world)
    torch.manual_seed(args.seed)  # same initial model on every rank (DDP also broadcasts rank 0's)
    model = common.build_model(args.dims)
    optimizer = common.build_optimizer(model.parameters(), args)
    # B per rank: prepare() shards whole batches over the processes.
    dataloader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    if rank == 0:
        common.log("%s: %s, backend %s, %d process(es)"
                   % (PROG, accelerator.distributed_type, accelerator.state.backend, world))
    batches = common.take_batches(dataloader, args.warmup + args.steps)

    def step(pixels, labels):
        return common.train_step(model, optimizer, pixels, labels, accelerator.backward)

    seconds, loss = common.timed_run(step, batches, args.warmup, args.steps)
    common.report("accelerate", args, world, rank, seconds, loss)
    accelerator.end_training()


if __name__ == "__main__":
    common.main_guard(PROG, main)
