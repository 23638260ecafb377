#!/bin/sh
# benchmarks/run-reduce-dtype.sh — run acx-bench-reduce-dtype (gradient
# reduction with reduce_dtype fp32 against bf16: wire bytes, reduce_dtype
# bytes and step time) on 2 and then 4 ranks, print each run's table and one
# summary table of both.
#
#   benchmarks/run-reduce-dtype.sh [BUILD_DIR] [--nps "2 4"] [-- BENCHMARK OPTIONS...]
#
# BUILD_DIR  a configured and built tree (default: build/ in the repository);
#            the benchmark is built there by `make check` or `make benchmarks`:
#            this script builds nothing.
# --nps L    the world sizes, run one after the other (default "2 4"; more
#            ranks than cores are oversubscribed, which slows every
#            collective: compare the two dtypes within a world size).
# Anything after -- goes to the benchmark (--numel, --steps, --rounds,
# --strategy, --half, --json ...).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=
nps="2 4"
while [ $# -gt 0 ]; do
    case $1 in
    --nps) [ $# -ge 2 ] || { echo "run-reduce-dtype.sh: --nps needs a value" >&2; exit 2; }
        nps=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run-reduce-dtype.sh: unknown option '$1' (benchmark options go after --)" >&2; exit 2 ;;
    *)
        [ -z "$build" ] || { echo "run-reduce-dtype.sh: unexpected argument '$1'" >&2; exit 2; }
        build=$1; shift ;;
    esac
done
build=${build:-$top/build}
bench=$build/benchmarks/acx-bench-reduce-dtype
if [ ! -x "$bench" ]; then
    echo "run-reduce-dtype.sh: $bench not built; run 'make -C $build benchmarks' first" >&2
    exit 1
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
out=$(mktemp)
trap 'rm -f "$out"' EXIT
summaries=
for np in $nps; do
    echo "== mpirun -np $np $bench $*"
    mpirun -np "$np" --oversubscribe "$bench" "$@" | tee "$out"
    line=$(grep '^summary: ' "$out") || { echo "run-reduce-dtype.sh: no summary line at np=$np" >&2; exit 1; }
    summaries="$summaries$line
"
    echo
done
echo "ranks  fp32 ms/step  16-bit ms/step  time 16-bit/fp32  wire bytes 16-bit/fp32  reduce_dtype bytes 16-bit/fp32"
printf '%s' "$summaries" | sed 's/^summary: //' | awk '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[i] = kv[2] }
    printf "%5s  %12s  %14s  %16s  %22s  %30s\n", v[1], v[2], v[3], v[4], v[5], v[6] }'
