#!/bin/sh
# benchmarks/run-fmnist-ddp.sh — run acx-bench-fmnist-ddp (the Fashion-MNIST
# training step through acx against a hand-rolled MPI data-parallel loop) on
# 2 ranks with the real data, and print its table and ratio.
#
#   benchmarks/run-fmnist-ddp.sh [BUILD_DIR [DATA.h5]] [--np N] [--skylakex]
#                                [-- BENCHMARK OPTIONS...]
#
# BUILD_DIR  a configured and built tree (default: build/ in the repository);
#            the benchmark is built there by `make check` or `make benchmarks`:
#            this script builds nothing.
# DATA.h5    Fashion-MNIST as `acx data import-idx` writes it (default:
#            data/fashion-mnist.h5 in the repository, imported from
#            /usr/share/datasets/fashion-mnist with BUILD_DIR/acx if missing).
# --np N     ranks (default 2).
# --skylakex also run a second table with OPENBLAS_CORETYPE=SkylakeX
#            (OpenBLAS 0.3.21 does not recognise this AVX-512 CPU and picks its
#            slower Prescott kernels; see ENVIRONMENT.md).
# Anything after -- goes to the benchmark (--rounds, --steps, --json ...).
#
# One BLAS thread per rank unless OPENBLAS_NUM_THREADS is set: ranks already
# occupy the cores, as in acx-fmnist's measured runs.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=
data=
np=2
skylakex=0
while [ $# -gt 0 ]; do
    case $1 in
    --np) [ $# -ge 2 ] || { echo "run-fmnist-ddp.sh: --np needs a value" >&2; exit 2; }
        np=$2; shift 2 ;;
    --skylakex) skylakex=1; shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,23s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run-fmnist-ddp.sh: unknown option '$1' (benchmark options go after --)" >&2; exit 2 ;;
    *)
        if [ -z "$build" ]; then build=$1
        elif [ -z "$data" ]; then data=$1
        else echo "run-fmnist-ddp.sh: unexpected argument '$1'" >&2; exit 2
        fi
        shift ;;
    esac
done
build=${build:-$top/build}
data=${data:-$top/data/fashion-mnist.h5}

bench=$build/benchmarks/acx-bench-fmnist-ddp
if [ ! -x "$bench" ]; then
    echo "run-fmnist-ddp.sh: $bench not built; run 'make -C $build benchmarks' first" >&2
    exit 1
fi

if [ ! -f "$data" ]; then
    src=/usr/share/datasets/fashion-mnist
    if [ ! -f "$src/train-images-idx3-ubyte.gz" ]; then
        echo "run-fmnist-ddp.sh: $data missing and $src not installed" \
            "(apt-get install dataset-fashion-mnist)" >&2
        exit 1
    fi
    mkdir -p "$(dirname "$data")"
    echo "== importing $src into $data"
    "$build/acx" data import-idx "$src" -o "$data"
fi

# mpirun as tests/lib.sh's mpirun_np: root, oversubscription allowed, shared
# memory only; ranks yield when idle only when there are more than cores.
set -- -np "$np" --oversubscribe "$bench" --data "$data" "$@"
if [ "$(id -u)" -eq 0 ]; then
    set -- --allow-run-as-root "$@"
fi
yield=0
if [ "$np" -gt "$(nproc 2>/dev/null || echo 1)" ]; then
    yield=1
fi
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=$yield
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

echo "== $np rank(s), OpenBLAS kernels chosen by OpenBLAS${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"
mpirun "$@"
if [ "$skylakex" -eq 1 ]; then
    echo
    echo "== $np rank(s), OPENBLAS_CORETYPE=SkylakeX"
    OPENBLAS_CORETYPE=SkylakeX mpirun "$@"
fi
