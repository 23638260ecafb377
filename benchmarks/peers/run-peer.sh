#!/bin/sh
# benchmarks/peers/run-peer.sh: run one training-throughput peer (Hugging Face
# Accelerate or plain PyTorch DDP) on N CPU ranks and print its result as the
# last line of stdout, for benchmarks/run-train.sh (acx-bench-train).
#
#   benchmarks/peers/run-peer.sh accelerate|ddp --np N --model fmnist|synthetic
#       [--data FILE.h5] [--dims IN,H1,H2,OUT] --batch-size B --steps S
#       --warmup W --threads T --lr X --weight-decay X --seed N
#
# accelerate  accelerate_fmnist.py under `accelerate launch` in Accelerate's
#             multi-CPU mode, `mpirun -n N` around it when N > 1 (see the
#             launch notes in accelerate_fmnist.py)
# ddp         ddp_fmnist.py under `torchrun --standalone --nproc-per-node N`
#
# Both train the acx-fmnist MLP (Fashion-MNIST from the HDF5 that `acx data
# import-idx` writes, or synthetic data, default dims 1024,4096,4096,1024)
# with AdamW, B samples per rank per step, T threads per rank (default 1),
# and time S steps after W warm-up steps; see docs/benchmarks.md.
#
# stdout: the launcher's and the ranks' lines go to stderr; the last (only)
# line of stdout is one JSON object:
#   {"impl":"ddp","ranks":N,"model":"fmnist","batch_size":B,"steps":S,
#    "samples_per_s":X,"step_ms":Y,"final_loss":L}
# Exit status: 0 done; 3 the peer environment is not installed (the message
# names what is missing and the command that installs it:
# benchmarks/peers/setup-venv.sh); 2 bad usage; 1 any other failure.
#
# Environment: ACX_PEERS_VENV (default $HOME/.cache/acx/peers-venv), as for
# setup-venv.sh.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
me=run-peer.sh
VENV=${ACX_PEERS_VENV:-${HOME:-/nonexistent}/.cache/acx/peers-venv}

usage() {
    sed -n '6,9s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

[ $# -ge 1 ] || usage
case $1 in
accelerate | ddp) impl=$1 ;;
-h | --help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
*) echo "$me: the first argument must be accelerate or ddp, not '$1'" >&2; usage ;;
esac
shift

# --np and --threads are the launcher's; everything else goes to the script,
# which checks it (common.parse_args). --json-out is ours.
np=1
threads=1
data=
n=$#
while [ $n -gt 0 ]; do
    a=$1
    shift
    n=$((n - 1))
    case $a in
    --np | --threads)
        [ $n -gt 0 ] || { echo "$me: $a needs a value" >&2; exit 2; }
        v=$1
        shift
        n=$((n - 1))
        case $v in '' | *[!0-9]* | 0*) echo "$me: $a must be a positive integer, not '$v'" >&2; exit 2 ;; esac
        if [ "$a" = --np ]; then np=$v; else threads=$v; set -- "$@" --threads "$v"; fi
        ;;
    --json-out) echo "$me: --json-out is set by $me itself" >&2; exit 2 ;;
    --data)
        [ $n -gt 0 ] || { echo "$me: --data needs a value" >&2; exit 2; }
        data=$1
        shift
        n=$((n - 1))
        set -- "$@" --data "$data"
        ;;
    *) set -- "$@" "$a" ;;
    esac
done

# ---- is the peer environment there? (exit 3 if not) ----
not_installed() {
    echo "$me: $1; install it with benchmarks/peers/setup-venv.sh (ACX_PEERS_VENV=$VENV)" >&2
    exit 3
}
py=$VENV/bin/python
[ -x "$py" ] || not_installed "no Python virtual environment at $VENV (for the $impl peer)"
missing=$("$py" -c '
import importlib.util
print(" ".join(m for m in ("torch", "accelerate", "h5py", "numpy") if importlib.util.find_spec(m) is None))' 2>/dev/null) ||
    not_installed "the Python in $VENV does not run"
[ -z "$missing" ] || not_installed "$VENV lacks the Python package(s) $missing"
if [ "$impl" = ddp ]; then launcher=$VENV/bin/torchrun; else launcher=$VENV/bin/accelerate; fi
[ -x "$launcher" ] || not_installed "$launcher is missing"

# Said here once, not by every rank through the launcher's error report.
if [ -n "$data" ] && [ ! -f "$data" ]; then
    echo "$me: --data $data: no such file (create it with \`acx data import-idx /usr/share/datasets/fashion-mnist -o $data\`)" >&2
    exit 1
fi

# ---- launch ----
tmp=$(mktemp -d "${TMPDIR:-/tmp}/acx-peer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
json=$tmp/result.json

# T threads per rank: OpenMP (torch's intra-op pool) reads OMP_NUM_THREADS at
# start-up; the scripts also call torch.set_num_threads(T).
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"
# gloo on this host only: its TCP pairs over loopback.
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}"
# No __pycache__ beside the scripts in the source tree.
export PYTHONDONTWRITEBYTECODE=1

if [ "$impl" = ddp ]; then
    set -- "$launcher" --standalone --nnodes 1 --nproc-per-node "$np" \
        "$here/ddp_fmnist.py" "$@" --json-out "$json"
else
    # Accelerate reads its settings from a config file (`accelerate config`
    # writes one); ours is written here so that a user's own default config
    # cannot change the peer. Keys as in Accelerate's "Training on Intel CPU"
    # guide: use_cpu, and with N > 1 distributed_type MULTI_CPU. Why mpirun
    # runs outside `accelerate launch` rather than inside it (the guide's
    # mpirun_config): see accelerate_fmnist.py.
    cfg=$tmp/accelerate.yaml
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if [ "$np" -eq 1 ]; then dtype=NO; else dtype=MULTI_CPU; fi
    cat >"$cfg" <<EOF
compute_environment: LOCAL_MACHINE
distributed_type: $dtype
downcast_bf16: 'no'
machine_rank: 0
main_process_ip: 127.0.0.1
main_process_port: $port
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: $np
rdzv_backend: static
same_network: true
use_cpu: true
EOF
    set -- "$launcher" launch --config_file "$cfg" --num_cpu_threads_per_process "$threads" \
        "$here/accelerate_fmnist.py" "$@" --json-out "$json"
    if [ "$np" -gt 1 ]; then
        command -v mpirun >/dev/null 2>&1 ||
            { echo "$me: the accelerate peer on $np processes needs mpirun (Open MPI) on PATH" >&2; exit 1; }
        # Open MPI only starts the processes (gloo, not MPI, carries the
        # data): bound to the socket as accelerate's own mpirun call binds
        # them, with overload allowed so that more ranks than cores can run.
        root=
        if [ "$(id -u)" -eq 0 ]; then root=--allow-run-as-root; fi
        set -- mpirun $root -n "$np" --oversubscribe --bind-to socket:overload-allowed "$@"
    fi
fi

echo "$me: $*" >&2
rc=0
"$@" >&2 || rc=$?
if [ $rc -ne 0 ]; then
    echo "$me: the $impl peer failed (exit status $rc of ${1##*/}; its messages are above)" >&2
    exit 1
fi
if [ ! -s "$json" ]; then
    echo "$me: the $impl peer exited 0 but wrote no result to $json" >&2
    exit 1
fi
tail -n 1 "$json"
